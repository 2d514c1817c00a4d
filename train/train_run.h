// One training run from its spec: the loaders, the net and optimiser (at the checkpoint's state
// when resuming), the backend's step, and the epoch loop over them: train the epoch, evaluate it,
// report it, checkpoint. All randomness is a function of (seed, epoch, step, sample id) and the
// loader can start mid-epoch, so a checkpoint's position plus its arrays is the whole state. A
// checkpoint after an epoch's last step but before its end (evaluation, line, record) is at step
// steps-per-epoch of that epoch: the run resumed from it makes that end first.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "input/loader.h"
#include "input/loader_sizing.h"
#include "shared/dataset_meta.h"
#include "shared/timer.h"
#include "train/evaluation.h"
#include "train/metrics_log.h"
#include "train/run_spec.h"
#include "train/step.h"
#include "train/stop_signal.h"

namespace convoy {

class TrainRun {
 public:
  // Sets the run up; the first epoch's files are being read when it returns.
  TrainRun(const TrainOptions& o, RunSpec spec, int rank, int ranks);
  TrainRun(const TrainRun&) = delete;
  TrainRun& operator=(const TrainRun&) = delete;
  // Trains the epochs left and writes the last checkpoint. Returns the exit code: 128 + the signal
  // when SIGINT or SIGTERM stopped the run (after a checkpoint where it stopped).
  int run();

 private:
  struct EpochClock {
    Stopwatch whole;
    double t_io = 0;        // waiting for the loader
    double t_io_first = 0;  // of it, for the epoch's first batch
  };
  // What stops the run after a step, the same on every rank: --stop-after, which lets the epoch's
  // end be made first, or a signal (or the launcher's loss), which stops it at once.
  enum class StopCause { none, stop_after, signal };
  void restore();
  void start_first_epoch();
  void same_state_on_every_rank();
  void start_average();
  std::optional<EvalResult> evaluate_epoch();
  void make_the_step();
  void restore_wire_maxima();
  void start_next_epoch(int epoch);
  std::string micro_text() const;
  std::string hosts_text() const;
  void open_metrics();
  void log_train_side(int epoch) const;
  std::optional<int> train_epoch(int epoch, long long first, EpochSums& sums, EpochClock& clock);
  void log_step(int epoch, long long step, long long first, double lr, EpochSums& sums, const EpochClock& clock);
  StopCause stop_cause() const;
  bool owes_end(int epoch) const;
  std::optional<int> stop_or_checkpoint(int epoch, long long step, EpochSums& sums);
  void checkpoint_after(int epoch, long long step, EpochSums& sums);
  int stopped(const char* where) const;
  void finish_epoch(int epoch, EpochSums& sums, const EpochClock& clock);
  std::optional<int> after_epoch(int epoch);
  double fold(EpochSums& sums);
  void check_nonfinite() const;
  // by_rank: each rank's sums (loss, hits, samples), with several ranks mid-epoch; else empty.
  void save(int epoch, long long step, const EpochSums& sums, const std::vector<double>& by_rank = {});

  const TrainOptions& o_;
  const RunSpec spec_;
  const TrainRecipe& rec_;
  // local_batch_: this rank's share of a global batch; micro_batch_: what the step trains at once,
  // local_batch_ / [train] accumulate (and the validation set's batch, which the GPU must hold).
  const int rank_, ranks_, local_batch_, micro_batch_;
  const DatasetMeta meta_;
  const Backend backend_;
  const ReaderChoice readers_;
  std::unique_ptr<Loader> train_loader_, val_loader_;
  Net net_;
  Optimizer opt_;
  std::optional<WeightAverage> average_;  // [train] ema
  int start_epoch_ = 0;
  int loader_epoch_ = -1;  // the epoch the training loader was last started on
  long long start_step_ = 0, global_step_ = 0;
  EpochSums carried_;   // resumed mid-epoch: that epoch's sums so far (this rank's own, or its share)
  int plan_ranks_ = 0;  // the ranks whose plan this epoch follows (another run's, resumed mid-epoch)
  std::unique_ptr<Step> step_;
  long long step_base_ = 0;  // the global step of step_'s first step (it counts its own from 0)
  long long per_epoch_ = 0;
  std::optional<LrSchedule> schedule_;
  std::unique_ptr<MetricsLog> metrics_;
  std::optional<EvalResult> last_eval_;
  HostBatch batch_;
  std::optional<StopSignals> stop_signals_;  // from the end of the set-up on
};

}  // namespace convoy
