// run_training: threads, the run's spec (agreed on by every rank), then --print-net or the run
// itself; run_eval: a checkpoint's net over a dataset, opened as --val opens one, on the CPU backend.
#include "train/trainer.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "input/loader_sizing.h"
#include "shared/error.h"
#include "shared/log.h"
#include "shared/timer.h"
#include "train/batch_tuner.h"
#include "train/cpu_step.h"
#include "train/data_parallel.h"
#include "train/run_spec.h"
#include "train/stop_signal.h"
#include "train/train_run.h"

namespace convoy {
namespace {

// threads 0: OMP_NUM_THREADS when set, else the node's cores over the ranks on it.
void set_threads(int threads, int local_ranks) {
  int t = threads;
  if (t <= 0 && std::getenv("OMP_NUM_THREADS")) t = omp_get_max_threads();  // the user's choice
  if (t <= 0) t = std::max(1, omp_get_num_procs() / std::max(1, local_ranks));
  // Parallelism comes from OpenMP over images and every BLAS call runs on its caller's thread. The
  // layers see to that themselves (train/layers/serial_blas.h); set once here, their guard finds one
  // thread already and leaves OpenBLAS alone instead of switching it at every layer of every step.
  omp_set_num_threads(t);
  openblas_set_num_threads(1);
}

int print_net(const RunSpec& spec, int rank) {
  const NetConfig& cfg = spec.cfg;
  Dims in{cfg.input_c, cfg.input_h, cfg.input_w};
  if (!spec.data_dir.empty()) in = input_dims(spec.data.shape, cfg.augment);
  if (in.c <= 0) fail_file(cfg.path, "--print-net without --data needs [net] input = [c, h, w]");
  Net net(cfg, in, int(spec.data.classes.size()));
  if (rank == 0) std::printf("%s: %s\n%s", cfg.path.c_str(), cfg.name.c_str(), net.summary().c_str());
  return 0;
}

// Runs `setup` (checks of the inputs, which make no collective call) on every rank and agrees on
// its verdict: when any rank refused, every rank throws SetupRefused (see trainer.h).
template <typename F>
auto agreed(int rank, int ranks, F setup) -> decltype(setup()) {
  if (ranks == 1) return setup();
  std::optional<decltype(setup())> result;
  std::string error;
  try {
    result.emplace(setup());
  } catch (const Error& e) {
    error = e.what();
  }
  std::vector<double> refused(size_t(ranks), 0.0);
  refused[size_t(rank)] = error.empty() ? 0 : 1;
  sum_over_ranks(refused.data(), ranks);
  const auto first = std::find_if(refused.begin(), refused.end(), [](double r) { return r > 0; });
  if (first == refused.end()) return std::move(*result);
  throw SetupRefused(first - refused.begin() == rank ? error : "");
}

LoaderOptions eval_loader_options(const EvalOptions& o, const NetConfig& cfg, int rank, int ranks) {
  const int readers = choose_readers(o.readers, omp_get_max_threads(), o.local_ranks).readers;
  return loader_options(o.data, o.batch, false, SampleOutput::floats, cfg.augment, DataShare{rank, ranks}, readers, 0);
}

// What `train eval` evaluates: the checkpoint's net, for a set checked as --val's is.
struct EvalSetup {
  NetConfig cfg;
  DataIdentity trained;
  Net net;
};

EvalSetup eval_setup(const EvalOptions& o) {
  const Checkpoint c = read_checkpoint(o.checkpoint);
  NetConfig cfg = config_of(c, o.checkpoint);
  DataIdentity trained = trained_on(c, o.checkpoint);
  check_evaluable(read_dataset_meta(o.data), o.data, trained);
  Net net = net_for_data(cfg, trained.shape, trained.classes.size(), trained.dir);
  if (c.weights.size() != net.weights().size() || c.state.size() != net.state().size())
    fail_file(o.checkpoint, "checkpoint arrays do not match the net built from its config");
  // With [train] ema the moving average is the net that training evaluated.
  const bool average = cfg.train.ema > 0;
  if (average && (c.avg_weights.size() != c.weights.size() || c.avg_state.size() != c.state.size()))
    fail_file(o.checkpoint, "checkpoint holds no moving average of the net's weights, which its [train] ema asks for");
  net.weights() = average ? c.avg_weights : c.weights;
  net.state() = average ? c.avg_state : c.state;
  return {std::move(cfg), std::move(trained), std::move(net)};
}

// The sweep on every rank (its inputs refused, if at all, in one line); per_rank 0 is refused too.
BatchSweep agreed_sweep(const TrainOptions& o, const RunSpec& spec, int rank, int ranks) {
  SweepInputs in = agreed(rank, ranks, [&] { return sweep_inputs(o, spec, rank, ranks); });
  BatchSweep s = sweep_batches(o, in, rank, ranks);
  if (s.per_rank > 0) return s;
  throw SetupRefused(rank > 0 ? "" : "--batch auto: not even a batch of 1 per rank fits: " + s.trials.at(0).no_fit);
}

// "lr = config lr x chosen global batch / config batch = 0.05 x 64 / 128 = 0.025".
std::string lr_rule(const RunSpec& spec, int global) {
  const TrainRecipe& r = spec.cfg.train;
  char text[200];
  std::snprintf(text, sizeof text, "lr = config lr x chosen global batch / config batch = %g x %d / %d = %g", r.lr,
                global, r.batch, scaled_lr(r.lr, r.batch, global));
  return text;
}

// --batch auto: a fresh run sweeps and trains at the fastest batch, its lr scaled (with [train]
// accumulate = k, the fastest micro-batch, k of which make a rank's batch); a resumed one
// keeps the batch and lr its checkpoint recorded (run_spec.cpp refuses one whose batch was set by hand).
void choose_batch(const TrainOptions& o, RunSpec& spec, int rank, int ranks) {
  if (spec.resume) {
    log_info("--batch auto: %s continues at the batch of %d chosen when it started (lr %g); no new sweep",
             o.resume.c_str(), spec.cfg.train.batch, spec.cfg.train.lr);
    return;
  }
  const BatchSweep s = agreed_sweep(o, spec, rank, ranks);
  for (const std::string& line : sweep_report(s)) log_info("%s", line.c_str());
  const int k = spec.cfg.train.accumulate, global = s.per_rank * k * ranks;
  const std::string micro = k > 1 ? ", as " + std::to_string(k) + " micro-batches of " + std::to_string(s.per_rank)
                                  : "";
  log_info("--batch auto: batch %d (%d per rank%s), %s", global, s.per_rank * k, micro.c_str(),
           lr_rule(spec, global).c_str());
  if (ranks > 1) log_all("--batch auto: this rank trains at %d per rank%s", s.per_rank * k, micro.c_str());
  spec.cfg.train.lr = scaled_lr(spec.cfg.train.lr, spec.cfg.train.batch, global);
  spec.cfg.train.batch = global;
  spec.batch_auto = true;
}

}  // namespace

int run_tune_batch(const TrainOptions& o, int rank, int ranks) {
  set_threads(o.threads, o.local_ranks);
  const RunSpec spec = agreed(rank, ranks, [&] { return read_run_spec(o, ranks); });
  const BatchSweep s = agreed_sweep(o, spec, rank, ranks);
  if (rank != 0) return 0;
  for (const std::string& line : sweep_report(s)) std::printf("%s\n", line.c_str());
  std::printf("with --batch auto: %s\n", lr_rule(spec, s.per_rank * spec.cfg.train.accumulate * ranks).c_str());
  std::fflush(stdout);
  return 0;
}

int run_training(const TrainOptions& o, int rank, int ranks) {
  clear_stop_signal();
  set_threads(o.threads, o.local_ranks);
  RunSpec spec = agreed(rank, ranks, [&] { return read_run_spec(o, ranks); });
  if (o.print_net) return print_net(spec, rank);
  // A resumed run computes as its checkpoint did, whatever the command line's defaults.
  TrainOptions used = o;
  used.backend = backend_for(o.backend, spec);
  if (used.batch_auto) choose_batch(used, spec, rank, ranks);
  TrainRun run(used, std::move(spec), rank, ranks);
  return run.run();
}

int run_eval(const EvalOptions& o, int rank, int ranks) {
  set_threads(o.threads, o.local_ranks);
  EvalSetup s = agreed(rank, ranks, [&] { return eval_setup(o); });
  const std::unique_ptr<Loader> loader = make_eval_loader(eval_loader_options(o, s.cfg, rank, ranks), s.trained);
  Stopwatch clock;
  CpuForward forward(s.net);
  const EvalResult r = evaluate(forward, *loader, s.net.classes(), s.cfg.train.eval_flip);
  log_info("%s on %s: %lld samples, loss %.4f top-1 %.4f top-5 %.4f (%.1f s)", o.checkpoint.c_str(), o.data.c_str(),
           r.samples, r.loss, r.top1, r.top5, clock.seconds());
  if (rank == 0) {
    std::printf("test accuracy: %.4f\n", r.top1);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace convoy
