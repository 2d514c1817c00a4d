// What the end of an epoch says: the epoch line (loss, accuracy, the evaluation, the time), the
// per-phase breakdown line, and the metrics file's epoch record.
#pragma once
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/evaluation.h"
#include "train/step.h"

namespace convoy {

struct EpochReport {
  int epoch = 0, epochs = 0;  // 0-based, of how many
  long long global_step = 0;
  EpochSums sums;              // over every rank
  bool count_skipped = false;  // --skip-nonfinite: the epoch line counts the skipped steps
  PhaseTimes times;
  double t_io = 0, train_seconds = 0, seconds = 0;  // seconds: training and evaluation
  double t_io_first = 0;                            // of t_io, the wait for the epoch's first batch
  // The samples trained in train_seconds: sums.samples less, in the epoch a run resumed in, those
  // of the steps before the checkpoint (timed by the run that made it).
  double timed_samples = 0;
  std::optional<EvalResult> eval;
  // [data] progressive: the side of the epoch's training crops, as its batches came (0: off).
  int train_side = 0;
  // With --profile: each all-reduce bucket's ready share of the backward pass by the profile's
  // per-node seconds so far (comm_plan.h); empty without.
  std::vector<double> bucket_ready;
};

void log_epoch(const EpochReport& r);
void log_breakdown(const EpochReport& r);
nlohmann::json epoch_record(const EpochReport& r);

}  // namespace convoy
