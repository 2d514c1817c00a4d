// The sweep: a step made at each size (its memory agreed on by every rank before any collective
// call of the step), warmed up, then timed in rounds of the same number of steps on every rank.
#include "train/batch_tuner.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <new>
#include <vector>

#include "input/loader_sizing.h"
#include "shared/counter_rng.h"
#include "shared/error.h"
#include "shared/timer.h"
#include "train/data_parallel.h"

namespace convoy {
namespace {

constexpr int kPoolSamples = 256;  // held in memory; a larger batch repeats them
constexpr int kWarmupSteps = 4;    // the GPU's first steps set cuDNN up and capture the two slots' graphs
constexpr int kRounds = 3;
constexpr double kRoundSeconds = 0.15;
constexpr double kMinRoundSteps = 3, kMaxRoundSteps = 1e5;

// Every rank's value of v, in rank order.
std::vector<double> gathered(double v, int rank, int ranks) {
  std::vector<double> all(size_t(ranks), 0.0);
  all[size_t(rank)] = v;
  if (ranks > 1) sum_over_ranks(all.data(), ranks);
  return all;
}

double max_over_ranks(double v, int rank, int ranks) {
  const std::vector<double> all = gathered(v, rank, ranks);
  return *std::max_element(all.begin(), all.end());
}

int floor_pow2(long long n) {
  int p = 1;
  while (2LL * p <= n) p *= 2;
  return p;
}

// MemAvailable of /proc/meminfo in bytes; 0 where it cannot be read.
double available_memory() {
  std::ifstream f("/proc/meminfo");
  std::string line;
  while (std::getline(f, line)) {
    double kib = 0;
    if (std::sscanf(line.c_str(), "MemAvailable: %lf kB", &kib) == 1) return kib * 1024;
  }
  return 0;
}

// The CPU step's memory at batch n: the net's buffers (Net::bytes_for), the batch of floats, and the
// weights, gradients and optimiser state.
double cpu_bytes(const SweepInputs& in, int n) {
  const double sample = double(in.pool.x.size()) / std::max(1, in.pool.n);
  const double fixed = double(in.net->weights().size() + in.net->grads().size() + in.opt->m.size() + in.opt->v.size());
  return double(in.net->bytes_for(n)) + (double(n) * sample + fixed) * sizeof(float);
}

void read_pool(const TrainOptions& o, const RunSpec& spec, int rank, int ranks, SweepInputs& in) {
  const DatasetMeta meta = read_dataset_meta(spec.data_dir);
  const int trainer_threads = in.backend == Backend::gpu ? 1 : omp_get_max_threads();
  const int readers = choose_readers(o.readers, trainer_threads, o.local_ranks).readers;
  auto options = [&](int batch) {
    return loader_options(spec.data_dir, batch, true,
                          in.backend == Backend::gpu ? SampleOutput::raw : SampleOutput::floats, spec.cfg.augment,
                          DataShare{rank, ranks, spec.seed, spec.window_files, spec.order}, readers, o.prefetch);
  };
  in.per_rank = Loader(options(1), meta).batches_per_epoch();
  if (in.per_rank == 0)
    fail_file(spec.data_dir,
              "--batch auto: too few samples for a batch of 1 on each of " + std::to_string(ranks) + " ranks");
  Loader loader(options(int(std::min<long long>(in.per_rank, kPoolSamples))), meta);
  // The sweep times the largest crops the run trains at ([data] progressive grows them by epoch).
  const ProgressiveResize& grow = spec.cfg.augment.progressive;
  loader.start_epoch(grow.on() ? largest_epoch(grow, spec.cfg.train.epochs) : 0);
  if (!loader.next(in.pool)) fail("the batch sweep's loader ended early (internal error)");
  in.format = loader.sample_format();
}

// The largest power of two per rank within the samples every rank is dealt, the flag's limit on the
// global batch and, on the CPU, the memory bound.
// With [train] accumulate = k the sizes are a rank's micro-batch, k of which make its batch.
void set_largest(const RunSpec& spec, int ranks, int local_ranks, SweepInputs& in) {
  const int k = in.accumulate;
  if (in.per_rank < k)
    fail_file(spec.data_dir, "--batch auto: too few samples for " + std::to_string(k) +
                                 " micro-batches of 1 ([train] accumulate) on each of " + std::to_string(ranks) +
                                 (ranks == 1 ? " rank" : " ranks"));
  in.largest = floor_pow2(std::min<long long>(in.per_rank / k, kMaxBatch / ranks / k));
  char text[400];
  if (k == 1)
    std::snprintf(text, sizeof text,
                  "sizes 1 to %d per rank (the samples each rank is dealt: %lld; batch at most %d in all)", in.largest,
                  in.per_rank, kMaxBatch);
  else
    std::snprintf(text, sizeof text,
                  "sizes 1 to %d per rank and micro-batch, %d of which ([train] accumulate) make a rank's batch (the "
                  "samples each rank is dealt: %lld; batch at most %d in all)",
                  in.largest, k, in.per_rank, kMaxBatch);
  in.limit = text;
  if (in.backend == Backend::gpu) {
    in.limit += ", each until one does not fit in the GPU's memory";
    return;
  }
  in.cpu_bound = available_memory() / std::max(1, local_ranks) / 2;
  if (in.cpu_bound > 0 && cpu_bytes(in, 1) > in.cpu_bound)
    fail_file(spec.cfg.path, "--batch auto: a batch of 1 needs about " + std::to_string(cpu_bytes(in, 1) / (1 << 20)) +
                                 " MiB, more than the memory bound (half of MemAvailable over the ranks on the node)");
  while (in.cpu_bound > 0 && in.largest > 1 && cpu_bytes(in, in.largest) > in.cpu_bound) in.largest /= 2;
  std::snprintf(text, sizeof text,
                "; on the CPU at most %d, whose step is estimated at %.2f MiB (the net's buffers, the batch, weights, "
                "gradients and optimiser state) within the bound of %.0f MiB: half of MemAvailable over the %d rank(s) "
                "on this node",
                in.largest, cpu_bytes(in, in.largest) / (1 << 20), in.cpu_bound / (1 << 20), std::max(1, local_ranks));
  in.limit += text;
}

// The pool's samples repeated to a batch of n.
HostBatch repeated(const HostBatch& pool, int n) {
  HostBatch b;
  b.n = n;
  b.height = pool.height, b.width = pool.width;
  const size_t xs = pool.x.size() / size_t(pool.n), ps = pool.pixels.size() / size_t(pool.n);
  b.x.reserve(xs * size_t(n));
  b.pixels.reserve(ps * size_t(n));
  for (int i = 0; i < n; ++i) {
    const size_t j = size_t(i % pool.n);
    b.x.insert(b.x.end(), pool.x.begin() + long(j * xs), pool.x.begin() + long((j + 1) * xs));
    b.pixels.insert(b.pixels.end(), pool.pixels.begin() + long(j * ps), pool.pixels.begin() + long((j + 1) * ps));
    if (!pool.flips.empty()) b.flips.push_back(pool.flips[j]);
    b.labels.push_back(pool.labels[j]);
    if (!pool.keys.empty()) b.keys.push_back(pool.keys[j]);
  }
  return b;
}

// Seconds for `steps` steps, the queue drained (fold waits for the GPU). The learning rate is 0: the
// update runs but leaves the weights where they started, so every size times the same arithmetic.
double seconds_for(Step& step, const HostBatch& b, int steps, long long& k) {
  EpochSums sums;
  Stopwatch clock;
  for (int i = 0; i < steps; ++i) step.train(b, dropout_step_key(1, k++), 0.0, sums);
  step.fold(sums);
  return clock.seconds();
}

// The best of kRounds rounds of the same number of steps on every rank (their steps' all-reduces
// pair up), after the warm-up.
double images_per_s(Step& step, const HostBatch& b, int rank, int ranks) {
  long long k = 0;
  seconds_for(step, b, kWarmupSteps, k);
  const double per_step = seconds_for(step, b, 2, k) / 2;
  const double wanted = std::clamp(std::ceil(kRoundSeconds / std::max(per_step, 1e-9)), kMinRoundSteps, kMaxRoundSteps);
  const int steps = int(max_over_ranks(wanted, rank, ranks));
  double best = 0;
  for (int r = 0; r < kRounds; ++r) best = std::max(best, double(steps) * b.n / seconds_for(step, b, steps, k));
  return best;
}

// On one rank a size that runs out of memory anywhere ends the sweep. On several, only the step's
// own agreed refusal (OutOfMemoryOnEveryRank) can: a rank that stops alone would leave the others
// waiting in the step's all-reduce, so that ends the job instead.
bool ends_sweep(const std::exception& e, int ranks) {
  return ranks == 1 || dynamic_cast<const OutOfMemoryOnEveryRank*>(&e) != nullptr;
}

BatchTrial try_size(const TrainOptions& o, SweepInputs& in, int n, int rank, int ranks) {
  BatchTrial t;
  t.batch = n;
  try {
    const HostBatch b = repeated(in.pool, n);
    const std::unique_ptr<Step> step = make_step(
        in.backend, StepSetup{*in.net, *in.opt, in.format, n, rank, ranks, o.local_rank, o.backend, false, false});
    t.images_per_s = images_per_s(*step, b, rank, ranks);
    t.memory_estimated = !step->device_bytes().has_value();
    t.memory_bytes = step->device_bytes().value_or(cpu_bytes(in, n));
  } catch (const OutOfMemory& e) {
    if (!ends_sweep(e, ranks)) throw;
    t.no_fit = std::string(dynamic_cast<const TensorTooLarge*>(&e) ? "too large: " : "out of memory: ") + e.what();
  } catch (const std::bad_alloc& e) {
    if (!ends_sweep(e, ranks)) throw;
    t.no_fit = "out of host memory";
  }
  return t;
}

std::string method_text(const SweepInputs& in, int ranks) {
  char text[600];
  std::snprintf(text, sizeof text,
                "the run's training step%s timed in %d rounds of the same number of steps (at least %.0f and %.2f s) "
                "after %d warm-up steps, the best round kept; on %d of the data's own samples (augmented as in "
                "training) held in memory and repeated to fill each batch, so that the loader's pace does not enter "
                "the figures (bench-loader times it)",
                ranks > 1 ? (", its gradients' all-reduce over " + std::to_string(ranks) + " ranks included").c_str()
                          : "",
                kRounds, kMinRoundSteps, kRoundSeconds, kWarmupSteps, in.pool.n);
  return text;
}

}  // namespace

SweepInputs sweep_inputs(const TrainOptions& o, const RunSpec& spec, int rank, int ranks) {
  SweepInputs in;
  in.backend = choose_backend(o.backend.device);
  read_pool(o, spec, rank, ranks, in);
  in.net = std::make_unique<Net>(net_for_data(spec.cfg, spec.data.shape, spec.data.classes.size(), spec.data_dir));
  in.net->init_weights(spec.seed);
  // The net's own optimiser (its exclusions, LARS's tensors): the step timed is the one trained.
  in.opt = std::make_unique<Optimizer>(spec.cfg.train, *in.net);
  in.accumulate = spec.cfg.train.accumulate;
  set_largest(spec, ranks, o.local_ranks, in);
  return in;
}

BatchSweep sweep_batches(const TrainOptions& o, SweepInputs& in, int rank, int ranks) {
  // The memory bound differs between nodes: every rank sweeps the same sizes.
  const std::vector<double> largest = gathered(in.largest, rank, ranks);
  const int upto = int(*std::min_element(largest.begin(), largest.end()));
  BatchSweep s;
  s.ranks = ranks;
  s.accumulate = in.accumulate;
  s.method = method_text(in, ranks);
  s.limit = in.limit;
  if (upto < in.largest) s.limit += "; another rank's bound: " + std::to_string(upto);
  s.hpl = hpl_batch(in.net->input_dims());
  for (int n = 1; n <= upto; n *= 2) {
    s.trials.push_back(try_size(o, in, n, rank, ranks));
    if (!s.trials.back().fits()) break;
  }
  s.per_rank = fastest_batch(s.trials);
  if (ranks > 1) {  // rank 0's table decides (the ranks' steps ran in step with each other)
    std::vector<float> choice{float(s.per_rank)};
    broadcast_floats(choice);
    s.per_rank = int(choice[0]);
  }
  return s;
}

}  // namespace convoy
