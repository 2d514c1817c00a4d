// TrainRun: set up in the order a run reports itself (the loader, the CUDA backend, the net), then
// the epochs. A resumed run repeats the uninterrupted one bit for bit, at any thread count.
#include "train/train_run.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "shared/atomic_file.h"
#include "shared/counter_rng.h"
#include "shared/error.h"
#include "shared/log.h"
#include "train/blas_setup.h"
#include "train/comm_plan.h"
#include "train/data_parallel.h"
#include "train/epoch_report.h"
#include "train/gpu_info.h"
#include "train/stop_signal.h"

namespace convoy {
namespace {

// The CUDA backend takes the augmented uint8 samples and normalises them on the GPU; its host
// thread needs a core of its own, the CPU backend's compute threads all of theirs.
ReaderChoice readers_for(const TrainOptions& o, Backend backend) {
  return choose_readers(o.readers, backend == Backend::gpu ? 1 : omp_get_max_threads(), o.local_ranks);
}

// The training set's and the validation set's loaders are asked for the same things.
LoaderOptions loader_options(const std::string& dir, bool train, const TrainOptions& o, const RunSpec& spec, int rank,
                             int ranks, int local_batch, Backend backend, int readers) {
  return loader_options(dir, local_batch, train, backend == Backend::gpu ? SampleOutput::raw : SampleOutput::floats,
                        spec.cfg.augment, DataShare{rank, ranks, spec.seed, spec.window_files, spec.order}, readers,
                        o.prefetch);
}

std::unique_ptr<Loader> make_train_loader(const LoaderOptions& lo, const DatasetMeta& meta, const std::string& why) {
  auto loader = std::make_unique<Loader>(lo, meta);
  log_info(
      "loader: %s; prefetch window %d batches, %d files held; buffers at most %.0f MiB (files x largest file + "
      "(window + 2) x batch + readers x sample)",
      why.c_str(), loader->prefetch(), loader->max_files(), double(loader->memory_bound()) / (1 << 20));
  return loader;
}

// The validation set is opened as `train eval` opens its set (evaluation.h).
std::unique_ptr<Loader> make_val_loader(const RunSpec& spec, const LoaderOptions& lo) {
  return spec.val ? make_eval_loader(lo, spec.data) : nullptr;
}

// Stops the run at the step (0-based over the run) whose loss was not finite; `loss` is this
// rank's, finite where only another rank's was not.
[[noreturn]] void fail_nonfinite(long long step, long long per_epoch, double loss) {
  const char* what = std::isnan(loss)   ? "nan"
                     : std::isinf(loss) ? (loss > 0 ? "inf" : "-inf")
                                        : "not finite on another rank";
  fail("step " + std::to_string(step + 1) + " (epoch " + std::to_string(step / per_epoch + 1) + "): the loss is " +
       what + "; stopping (--skip-nonfinite skips such steps)");
}

// Loss, hits and samples summed over the ranks (the skipped steps are the same on every rank).
void add_up_ranks(EpochSums& s) {
  double v[3] = {s.loss, s.correct, s.samples};
  sum_over_ranks(v, 3);
  s.loss = v[0], s.correct = v[1], s.samples = v[2];
}

// Each rank's loss, hits and samples (3 values a rank, by rank) on every rank; the other ranks' slots
// are 0 in each rank's copy, so the sum over the ranks is exact.
std::vector<double> sums_by_rank(const EpochSums& s, int rank, int ranks) {
  std::vector<double> v(3 * size_t(ranks), 0.0);
  v[3 * size_t(rank)] = s.loss, v[3 * size_t(rank) + 1] = s.correct, v[3 * size_t(rank) + 2] = s.samples;
  sum_over_ranks(v.data(), int(v.size()));
  return v;
}

// A checkpoint's epoch sums so far as this rank goes on from them. They were saved as each of the
// saving run's ranks' share of the total, and with several ranks as each rank's own: on as many
// ranks each rank goes on from its own, so that the epoch's figures add up as the uninterrupted
// run's do, bit for bit (a share of the total rounds otherwise).
EpochSums carried_sums(const nlohmann::json& info, int rank, int ranks) {
  const nlohmann::json& sums = info.at("epoch_sums");
  const int saved_on = info.at("ranks").get<int>();
  EpochSums c{sums.at(0).get<double>(), sums.at(1).get<double>(), sums.at(2).get<double>(),
              info.value("epoch_skipped", 0LL)};
  const auto own = info.find("epoch_sums_by_rank");
  if (saved_on == ranks && own != info.end() && own->size() == 3 * size_t(ranks)) {
    const size_t at = 3 * size_t(rank);
    c.loss = own->at(at).get<double>(), c.correct = own->at(at + 1).get<double>();
    c.samples = own->at(at + 2).get<double>();
  } else if (saved_on != ranks) {
    const double to_share = double(saved_on) / ranks;
    c.loss *= to_share, c.correct *= to_share, c.samples *= to_share;
  }
  return c;
}

// The spec with its device resolved to the backend it trains on, as its checkpoints record it: a
// resumed run with --device left out goes on there, or stops, rather than moving to the CPU where
// no GPU is visible.
RunSpec on_device(RunSpec s, const std::string& resumed_from) {
  if (s.resume && s.backend.device == Device::cuda && gpu_count() == 0)
    fail("--resume " + resumed_from +
         ": the run trained on a GPU and this process sees none; --device cpu goes on "
         "on the CPU");
  s.backend.device = choose_backend(s.backend.device) == Backend::gpu ? Device::cuda : Device::cpu;
  return s;
}

}  // namespace

TrainRun::TrainRun(const TrainOptions& o, RunSpec spec, int rank, int ranks)
    : o_(o), spec_(on_device(std::move(spec), o.resume)), rec_(spec_.cfg.train), rank_(rank), ranks_(ranks),
      local_batch_(rec_.batch / ranks), micro_batch_(local_batch_ / rec_.accumulate),
      meta_(read_dataset_meta(spec_.data_dir)),
      backend_(spec_.backend.device == Device::cuda ? Backend::gpu : Backend::cpu), readers_(readers_for(o, backend_)),
      train_loader_(make_train_loader(
          loader_options(spec_.data_dir, true, o, spec_, rank, ranks, local_batch_, backend_, readers_.readers), meta_,
          readers_.why)),
      val_loader_(make_val_loader(spec_, loader_options(spec_.val_dir, false, o, spec_, rank, ranks, micro_batch_,
                                                        backend_, readers_.readers))),
      net_(net_for_data(spec_.cfg, meta_.shape, meta_.classes.size(), spec_.data_dir)), opt_(rec_, net_) {
  net_.set_profiling(o.profile);
  net_.init_weights(spec_.seed);
  per_epoch_ = train_loader_->batches_per_epoch();
  if (per_epoch_ == 0)
    fail_file(spec_.data_dir, "too few samples for one batch of " + std::to_string(local_batch_) + " per rank");
  restore();
  // The readers start on the first epoch's files now, while the GPU (if any) sets itself up.
  if (start_epoch_ < rec_.epochs) start_first_epoch();
  if (ranks_ > 1) same_state_on_every_rank();
  start_average();
  make_the_step();
  schedule_.emplace(rec_, per_epoch_ * rec_.epochs, per_epoch_);
  log_info(
      "%s: %zu parameters, %.1f MFLOPs/image; %llu training samples, %d rank(s)%s x %d threads (BLAS %s), batch %d "
      "(%d per rank%s), %lld steps/epoch",
      spec_.cfg.path.c_str(), net_.weights().size(), net_.flops_per_image() / 1e6,
      (unsigned long long)meta_.num_samples, ranks, hosts_text().c_str(), omp_get_max_threads(), blas_core_name(),
      rec_.batch, local_batch_, micro_text().c_str(), per_epoch_);
  open_metrics();
  stop_signals_.emplace(rank_ == 0 && !o_.checkpoint.empty());
}

void TrainRun::restore() {
  if (!spec_.resume) return;
  const Checkpoint& c = *spec_.resume;
  if (c.weights.size() != net_.weights().size() || c.state.size() != net_.state().size() ||
      c.m.size() != opt_.m.size() || c.v.size() != opt_.v.size())
    fail_file(o_.resume, "checkpoint arrays do not match the net built from its config");
  net_.weights() = c.weights;
  net_.state() = c.state;
  opt_.m = c.m;
  opt_.v = c.v;
  const nlohmann::json& info = c.info;
  opt_.t = info.at("opt_t").get<long long>();
  start_epoch_ = info.at("epoch").get<int>();
  start_step_ = info.at("step").get<long long>();
  global_step_ = info.at("global_step").get<long long>();
  const int saved_on = info.at("ranks").get<int>();
  carried_ = carried_sums(info, rank_, ranks_);
  // Global order's epochs are the same at any ranks: there is no other plan to follow.
  plan_ranks_ = spec_.order == SampleOrder::global ? ranks_ : info.value("plan_ranks", saved_on);
  // The checks of run_spec.cpp (the same data, global batch, seed and window) make this hold. At
  // per_epoch_ the epoch's steps are all trained, its end owed (owes_end).
  if (start_step_ > per_epoch_)
    fail_file(o_.resume, "resumes at step " + std::to_string(start_step_ + 1) + " of an epoch of " +
                             std::to_string(per_epoch_) + " steps");
}

// A run resumed mid-epoch on other ranks than that epoch's plan trains the rest of the epoch's
// global batches as that plan has them, each rank its share of every one (epoch_plan.h); the next
// epoch follows this run's own plan.
void TrainRun::start_first_epoch() {
  if (owes_end(start_epoch_)) return;  // that end starts the next epoch (finish_epoch)
  if (start_step_ == 0) plan_ranks_ = ranks_;
  train_loader_->start_epoch(start_epoch_, start_step_, plan_ranks_);
  loader_epoch_ = start_epoch_;
  if (plan_ranks_ == ranks_) return;
  log_info(
      "resumed on %d rank(s) at step %lld of epoch %d, which follows the plan of %d rank(s): the rest of the epoch "
      "trains that plan's global batches (each rank may read any file: %d files held, buffers at most %.0f MiB)",
      ranks_, start_step_ + 1, start_epoch_ + 1, plan_ranks_, train_loader_->max_files(),
      double(train_loader_->memory_bound()) / (1 << 20));
}

// Every rank starts from rank 0's weights (each rank may have initialised or read its own).
void TrainRun::same_state_on_every_rank() {
  broadcast_floats(net_.weights());
  broadcast_floats(net_.state());
  broadcast_floats(opt_.m);
  broadcast_floats(opt_.v);
}

// [train] ema: a fresh run's average starts at its starting weights, a resumed one's where the
// checkpoint left it; every rank's is rank 0's.
void TrainRun::start_average() {
  if (rec_.ema <= 0) return;
  average_.emplace(rec_.ema, net_);
  if (spec_.resume) {
    const Checkpoint& c = *spec_.resume;
    if (c.avg_weights.size() != net_.weights().size() || c.avg_state.size() != net_.state().size())
      fail_file(o_.resume, "checkpoint holds no moving average of the net's weights, which its [train] ema asks for");
    average_->weights = c.avg_weights;
    average_->state = c.avg_state;
  }
  if (ranks_ == 1) return;
  broadcast_floats(average_->weights);
  broadcast_floats(average_->state);
}

// The step holds a micro-batch at a time; train() hands it the rank's whole share of each step.
void TrainRun::make_the_step() {
  step_ = make_step(backend_, StepSetup{net_, opt_, train_loader_->sample_format(), std::max(micro_batch_, 1), rank_,
                                        ranks_, o_.local_rank, o_.backend, o_.skip_nonfinite, o_.profile,
                                        average_ ? &*average_ : nullptr, rec_.accumulate});
  step_base_ = global_step_;
  restore_wire_maxima();
}

// fp8 on the wire scales each bucket by its largest gradient of the step before: a resumed run takes
// them from its checkpoint, so that it repeats the uninterrupted run. A checkpoint without them (or
// of other buckets) costs that exactness for the first step only, which then scales by its own.
void TrainRun::restore_wire_maxima() {
  if (!spec_.resume) return;
  const nlohmann::json& info = spec_.resume->info;
  const auto it = info.find("fp8_maxima");
  const bool set = it != info.end() && step_->set_wire_maxima(it->get<std::vector<float>>());
  const bool fp8 = backend_ == Backend::gpu && ranks_ > 1 && scaled_fp8(spec_.backend.grad_comm);
  if (fp8 && !set && rank_ == 0)
    log_info("%s holds no fp8 gradient maxima for these buckets: the first step scales by its own, as a fresh run's",
             o_.resume.c_str());
}

// ", as 4 micro-batches of 8 ([train] accumulate)" where the recipe accumulates, else "".
std::string TrainRun::micro_text() const {
  if (rec_.accumulate == 1) return "";
  return ", as " + std::to_string(rec_.accumulate) + " micro-batches of " + std::to_string(micro_batch_) +
         " ([train] accumulate)";
}

// " on 2 hosts" where the ranks span hosts (as NCCL sees them), else "".
std::string TrainRun::hosts_text() const {
  return o_.reach.hosts > 1 ? " on " + std::to_string(o_.reach.hosts) + " hosts" : "";
}

void TrainRun::open_metrics() {
  if (rank_ != 0 || o_.metrics.empty()) return;
  metrics_ = std::make_unique<MetricsLog>(o_.metrics, !o_.resume.empty());
  if (const std::optional<double> setup = step_->setup_seconds())
    metrics_->write({{"kind", "setup"}, {"gpu_setup_seconds", *setup}, {"gpu_libraries", gpu_libraries()}});
  nlohmann::json plan = comm_plan_record(comm_plan(net_, o_.backend, backend_), net_, ranks_, o_.reach.hosts,
                                         local_batch_);
  plan["accumulate"] = rec_.accumulate;  // one all-reduce per this many micro-batches
  metrics_->write(plan);
}

int TrainRun::run() {
  if (spec_.resume && start_epoch_ >= rec_.epochs)
    log_info("%s: the run is complete (%d epochs); --epochs extends it", o_.resume.c_str(), rec_.epochs);
  for (int epoch = start_epoch_; epoch < rec_.epochs; ++epoch) {
    const bool resumed = epoch == start_epoch_;
    EpochSums sums = resumed ? carried_ : EpochSums{};
    EpochClock clock;
    log_train_side(epoch);
    if (const std::optional<int> code = train_epoch(epoch, resumed ? start_step_ : 0, sums, clock)) return *code;
    finish_epoch(epoch, sums, clock);
    if (const std::optional<int> code = after_epoch(epoch)) return *code;
  }
  save(rec_.epochs, 0, EpochSums{});
  if (last_eval_ && rank_ == 0) {
    std::printf("test accuracy: %.4f\n", last_eval_->top1);
    std::fflush(stdout);
  }
  return 0;
}

// [data] progressive: the side the epoch trains at, said where it changes (and where a run starts).
void TrainRun::log_train_side(int epoch) const {
  const AugmentSpec& a = spec_.cfg.augment;
  if (!a.progressive.on() || owes_end(epoch)) return;
  const int side = train_crop(a, epoch);
  const int first = owes_end(start_epoch_) ? start_epoch_ + 1 : start_epoch_;  // the first this run trains
  if (epoch > first && side == train_crop(a, epoch - 1)) return;
  log_info("epoch %d trains at %dx%d ([data] progressive; evaluation at %dx%d)", epoch + 1, side, side, a.crop, a.crop);
}

// The epoch's steps from `first` (the loader was started on it before); the exit code when a
// signal or --stop-after ends the run within it.
std::optional<int> TrainRun::train_epoch(int epoch, long long first, EpochSums& sums, EpochClock& clock) {
  Stopwatch lap;
  for (long long step = first; step < per_epoch_; ++step) {
    lap.reset();
    if (!train_loader_->next(batch_)) fail("loader ended early (internal error)");
    const double io = lap.lap();
    clock.t_io += io;
    if (step == first) clock.t_io_first = io;
    if (step + 1 == per_epoch_) start_next_epoch(epoch);
    const double lr = schedule_->at(global_step_);
    step_->train(batch_, dropout_step_key(spec_.seed, global_step_), lr, sums);
    check_nonfinite();
    ++global_step_;
    if (o_.log_every > 0 && (step + 1) % o_.log_every == 0) log_step(epoch, step, first, lr, sums, clock);
    if (const std::optional<int> code = stop_or_checkpoint(epoch, step, sums)) return code;
  }
  return std::nullopt;
}

void TrainRun::log_step(int epoch, long long step, long long first, double lr, EpochSums& sums,
                        const EpochClock& clock) {
  // The global batch's loss: the ranks' local batches are of one size, so the mean of their means.
  double loss = fold(sums);
  if (ranks_ > 1) {
    sum_over_ranks(&loss, 1);
    loss /= ranks_;
  }
  log_info("epoch %d step %lld/%lld loss %.4f lr %.5f %.0f img/s", epoch + 1, step + 1, per_epoch_, loss, lr,
           double((step + 1 - first) * rec_.batch) / clock.whole.seconds());
  if (metrics_)
    metrics_->write({{"kind", "step"},
                     {"epoch", epoch + 1},
                     {"step", step + 1},
                     {"global_step", global_step_},
                     {"loss", loss},
                     {"lr", lr}});
}

TrainRun::StopCause TrainRun::stop_cause() const {
  bool signalled = stop_signal() != 0;
  if (ranks_ > 1) signalled = any_rank(signalled);
  if (signalled) return StopCause::signal;
  return o_.stop_after > 0 && global_step_ >= o_.stop_after ? StopCause::stop_after : StopCause::none;
}

// Resumed from a checkpoint written after the epoch's last step: its end is all that is left of it.
bool TrainRun::owes_end(int epoch) const { return epoch == start_epoch_ && start_step_ == per_epoch_; }

// After an epoch's last step only a signal stops the run here, its checkpoint owing the epoch's end
// (a scheduler's grace may be a second); the rest is after_epoch's, once the end is made.
std::optional<int> TrainRun::stop_or_checkpoint(int epoch, long long step, EpochSums& sums) {
  stop_signals_->step_done();
  const StopCause why = stop_cause();
  const bool at_end = step + 1 == per_epoch_;
  if (at_end && why != StopCause::signal) return std::nullopt;
  const bool due = o_.checkpoint_every > 0 && global_step_ % o_.checkpoint_every == 0;
  if (why != StopCause::none || due) checkpoint_after(epoch, step, sums);
  if (why == StopCause::none) return std::nullopt;
  return stopped(at_end ? " (the last of its epoch: a resumed run makes the epoch's evaluation and record first)" : "");
}

// Within an epoch the checkpoint carries the epoch's sums so far, as each rank's share of the
// total (on resume on other ranks each rank's sums restart from the global figure / ranks), and
// with several ranks each rank's own (on resume on as many ranks, each restarts from its own).
void TrainRun::checkpoint_after(int epoch, long long step, EpochSums& sums) {
  fold(sums);
  EpochSums share = sums;
  std::vector<double> by_rank;
  if (ranks_ > 1) {
    by_rank = sums_by_rank(sums, rank_, ranks_);
    add_up_ranks(share);
  }
  share.loss /= ranks_, share.correct /= ranks_, share.samples /= ranks_;
  save(epoch, step + 1, share, by_rank);
}

// `where`: what the stop line adds after the step.
int TrainRun::stopped(const char* where) const {
  if (o_.profile && rank_ == 0) std::fprintf(stderr, "%s", net_.profile().c_str());
  const int sig = stop_signal();
  const char* saved = spec_.checkpoint.empty() ? " (no --checkpoint: nothing saved)" : where;
  if (sig)
    log_info("stopped by signal %d after step %lld%s", sig, global_step_, saved);
  else
    log_info("stopped after step %lld%s", global_step_, saved);
  return sig ? 128 + sig : 0;
}

// After an epoch's end (the last epoch's is the run's): the checkpoint at the next epoch's start
// where one is due, or the one resumed from owed this end, or the run stops here (--stop-after
// reached at the epoch's last step, a signal during the evaluation).
std::optional<int> TrainRun::after_epoch(int epoch) {
  if (epoch + 1 == rec_.epochs) return std::nullopt;
  const StopCause why = stop_cause();
  const bool due = (o_.checkpoint_every > 0 && global_step_ % o_.checkpoint_every == 0) || owes_end(epoch);
  if (why != StopCause::none || due) save(epoch + 1, 0, EpochSums{});
  if (why == StopCause::none) return std::nullopt;
  return stopped(" (at the end of its epoch)");
}

// The next epoch's first batches are built while this one's last step trains and its end is
// recorded and evaluated: with short epochs (64,000 samples over 4 GPUs take 0.7 s) the wait for them
// was 2-3 % of the training time. Its order is that of (seed, epoch) alone, whenever it starts.
void TrainRun::start_next_epoch(int epoch) {
  if (epoch + 1 >= rec_.epochs || loader_epoch_ == epoch + 1) return;
  train_loader_->start_epoch(epoch + 1, 0);
  loader_epoch_ = epoch + 1;
}

void TrainRun::finish_epoch(int epoch, EpochSums& sums, const EpochClock& clock) {
  plan_ranks_ = ranks_;
  start_next_epoch(epoch);
  fold(sums);
  if (ranks_ > 1) add_up_ranks(sums);
  EpochReport r;
  r.epoch = epoch;
  r.epochs = rec_.epochs;
  r.global_step = global_step_;
  r.sums = sums;
  r.timed_samples = sums.samples - (epoch == start_epoch_ ? carried_.samples * ranks_ : 0.0);
  r.count_skipped = o_.skip_nonfinite;
  r.times = step_->take_times();
  r.t_io = clock.t_io;
  r.t_io_first = clock.t_io_first;
  // An epoch whose end alone was left to this run trained at its side as the function has it.
  if (spec_.cfg.augment.progressive.on())
    r.train_side = owes_end(epoch) ? train_crop(spec_.cfg.augment, epoch) : batch_.height;
  r.train_seconds = clock.whole.seconds();
  if (val_loader_) last_eval_ = evaluate_epoch();
  r.eval = last_eval_;
  r.seconds = clock.whole.seconds();
  log_epoch(r);
  step_->add_profile_to(net_);
  if (o_.profile && rank_ == 0) std::fprintf(stderr, "%s", net_.profile().c_str());
  if (o_.profile)
    r.bucket_ready = bucket_ready_fractions(net_.nodes(), comm_plan(net_, o_.backend, backend_).buckets,
                                            profiled_backward_cost(net_.nodes()));
  log_breakdown(r);
  if (metrics_) metrics_->write(epoch_record(r));
}

// Every rank evaluates rank 0's running statistics (Step::sync_state); with [train] ema, the
// average's weights, and the trained ones put back after.
std::optional<EvalResult> TrainRun::evaluate_epoch() {
  if (ranks_ > 1) step_->sync_state();
  step_->swap_average();
  const EvalResult r = evaluate(*step_, *val_loader_, net_.classes(), rec_.eval_flip);
  step_->swap_average();
  return r;
}

// The backend's figures join the epoch's sums when the sums are read: log lines, checkpoints,
// the end of an epoch. Returns the last step's loss.
double TrainRun::fold(EpochSums& sums) {
  const double loss = step_->fold(sums);
  check_nonfinite();
  return loss;
}

// The CUDA backend checks each step's loss on the GPU, and the host learns of a non-finite one
// when it waits for that step: at most two steps later, and before any checkpoint. Without
// --skip-nonfinite the run stops there, its last checkpoint left as it was.
void TrainRun::check_nonfinite() const {
  if (o_.skip_nonfinite) return;
  const NonFiniteLoss bad = step_->first_nonfinite();
  if (bad.step >= 0) fail_nonfinite(step_base_ + bad.step, per_epoch_, bad.loss);
}

// `epoch` and `step` are where a resumed run starts. The checkpoint holds the running statistics
// every rank now has (rank 0's, Step::sync_state), which a resumed run's ranks all start from.
void TrainRun::save(int epoch, long long step, const EpochSums& sums, const std::vector<double>& by_rank) {
  if (spec_.checkpoint.empty()) return;
  if (ranks_ > 1) step_->sync_state();
  step_->sync_to(net_, opt_);
  if (rank_ != 0) return;
  Checkpoint c;
  c.info = run_record(spec_, ranks_);
  c.info.update({{"epoch", epoch},
                 {"step", step},
                 {"global_step", global_step_},
                 {"opt_t", opt_.t},
                 {"plan_ranks", step > 0 ? plan_ranks_ : ranks_},
                 {"epoch_sums", {sums.loss, sums.correct, sums.samples}},
                 {"epoch_skipped", sums.skipped}});
  if (!by_rank.empty()) c.info["epoch_sums_by_rank"] = by_rank;
  c.weights = net_.weights();
  c.state = net_.state();
  c.m = opt_.m;
  c.v = opt_.v;
  if (const std::vector<float> w = step_->wire_maxima(); !w.empty()) c.info["fp8_maxima"] = w;
  if (average_) {
    c.avg_weights = average_->weights;
    c.avg_state = average_->state;
  }
  write_checkpoint(spec_.checkpoint, c);
  log_info("checkpoint %s at step %lld", spec_.checkpoint.c_str(), global_step_);
}

}  // namespace convoy
