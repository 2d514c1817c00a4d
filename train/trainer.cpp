// run_training: threads, the run's spec, then --print-net or the run itself; run_eval: a
// checkpoint's net over a dataset, on the CPU backend.
#include "train/trainer.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "shared/error.h"
#include "shared/log.h"
#include "shared/timer.h"
#include "train/cpu_step.h"
#include "train/loader_sizing.h"
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
  omp_set_num_threads(t);
  // Parallelism comes from OpenMP over images; each BLAS call runs on its caller's thread so
  // the two thread pools never fight over the cores.
  openblas_set_num_threads(1);
}

int print_net(const NetConfig& cfg, const std::string& data, int rank) {
  Dims in{cfg.input_c, cfg.input_h, cfg.input_w};
  if (!data.empty()) in = input_dims(read_dataset_meta(data), cfg.augment);
  if (in.c <= 0) fail_file(cfg.path, "--print-net without --data needs [net] input = [c, h, w]");
  Net net(cfg, in, data.empty() ? 0 : int(read_dataset_meta(data).classes.size()));
  if (rank == 0) std::printf("%s: %s\n%s", cfg.path.c_str(), cfg.name.c_str(), net.summary().c_str());
  return 0;
}

LoaderOptions eval_loader_options(const EvalOptions& o, const NetConfig& cfg, int rank, int ranks) {
  LoaderOptions lo;
  lo.dir = o.data;
  lo.local_batch = o.batch;
  lo.readers = choose_readers(o.readers, omp_get_max_threads(), o.local_ranks).readers;
  lo.train = false;
  lo.rank = rank;
  lo.ranks = ranks;
  lo.augment = cfg.augment;
  return lo;
}

}  // namespace

int run_training(const TrainOptions& o, int rank, int ranks) {
  clear_stop_signal();
  set_threads(o.threads, o.local_ranks);
  RunSpec spec = read_run_spec(o);
  if (o.print_net) return print_net(spec.cfg, o.data, rank);
  TrainRun run(o, std::move(spec), rank, ranks);
  return run.run();
}

int run_eval(const EvalOptions& o, int rank, int ranks) {
  set_threads(o.threads, o.local_ranks);
  const Checkpoint c = read_checkpoint(o.checkpoint);
  const NetConfig cfg = config_of(c, o.checkpoint);
  const DatasetMeta meta = read_dataset_meta(o.data);
  Net net = net_for_data(cfg, meta, o.data);
  if (c.weights.size() != net.weights().size() || c.state.size() != net.state().size())
    fail_file(o.checkpoint, "checkpoint arrays do not match the net built from its config");
  net.weights() = c.weights;
  net.state() = c.state;
  Loader loader(eval_loader_options(o, cfg, rank, ranks), meta);
  Stopwatch clock;
  CpuForward forward(net);
  const EvalResult r = evaluate(forward, loader, net.classes());
  log_info("%s on %s: %lld samples, loss %.4f top-1 %.4f top-5 %.4f (%.1f s)", o.checkpoint.c_str(), o.data.c_str(),
           r.samples, r.loss, r.top1, r.top5, clock.seconds());
  if (rank == 0) {
    std::printf("test accuracy: %.4f\n", r.top1);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace convoy
