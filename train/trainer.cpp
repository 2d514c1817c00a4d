// The training loop. All randomness is a function of (seed, epoch, step, sample id), and the
// loader can start mid-epoch, so a checkpoint's position plus its arrays is the whole state:
// a resumed run repeats the uninterrupted one bit for bit (given the same thread count).
#include "train/trainer.h"

#include <cblas.h>
#include <sys/resource.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <memory>

#include "shared/atomic_file.h"
#include "shared/dataset_meta.h"
#include "shared/error.h"
#include "shared/log.h"
#include "shared/mpi_context.h"
#include "shared/timer.h"
#include "train/blas_setup.h"
#include "train/checkpoint.h"
#include "train/data_parallel.h"
#include "train/layers/dropout.h"
#include "train/loader.h"
#include "train/loader_sizing.h"
#include "train/metrics_log.h"
#include "train/net.h"
#include "train/optimizer.h"
#ifdef CONVOY_HAVE_CUDA
#include "train/gpu_info.h"
#include "train/gpu_step.h"
#endif

namespace convoy {
namespace {

// Set by the handler, which may run on any thread (the loader's readers too); a lock-free atomic
// is both async-signal-safe and free of data races.
std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal flag must be lock-free");
extern "C" void on_signal(int sig) { g_signal.store(sig, std::memory_order_relaxed); }

void set_threads(int threads, int ranks) {
  int t = threads;
  if (t <= 0 && std::getenv("OMP_NUM_THREADS")) t = omp_get_max_threads();  // the user's choice
  if (t <= 0) {
    int local = 1;
    MPI_Comm node;
    CONVOY_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    CONVOY_MPI_CHECK(MPI_Comm_size(node, &local));
    CONVOY_MPI_CHECK(MPI_Comm_free(&node));
    t = std::max(1, omp_get_num_procs() / std::max(1, std::min(local, ranks)));
  }
  omp_set_num_threads(t);
  // Parallelism comes from OpenMP over images; each BLAS call runs on its caller's thread so
  // the two thread pools never fight over the cores.
  openblas_set_num_threads(1);
}

// The process's peak resident memory so far.
long long peak_rss_bytes() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return (long long)u.ru_maxrss * 1024;  // kilobytes on Linux
}

// Counts correct top-1 and top-5 predictions among n rows of probabilities.
void count_correct(int n, int classes, const float* probs, const int32_t* labels, double& top1, double& top5) {
  for (int i = 0; i < n; ++i) {
    const float* p = probs + size_t(i) * classes;
    const float mine = p[labels[i]];
    int above = 0;
    for (int k = 0; k < classes; ++k)
      if (p[k] > mine || (p[k] == mine && k < labels[i])) ++above;
    top1 += above == 0;
    top5 += above < 5;
  }
}

// The CUDA backend's step, or null on the CPU backend (and in builds without CUDA).
#ifdef CONVOY_HAVE_CUDA
using GpuStepPtr = std::unique_ptr<gpu::GpuStep>;
#else
struct NoGpu {};
using GpuStepPtr = std::unique_ptr<NoGpu>;
#endif

EvalResult evaluate(Net& net, Loader& loader, [[maybe_unused]] const GpuStepPtr& gpu = nullptr) {
  loader.start_epoch(0);
  HostBatch b;
  double sums[4] = {0, 0, 0, 0};  // loss, top1, top5, samples
  while (loader.next(b)) {
    const float* losses = nullptr;
    const float* probs = nullptr;
#ifdef CONVOY_HAVE_CUDA
    if (gpu) {
      gpu->evaluate(b);
      losses = gpu->losses();
      probs = gpu->probs();
    }
#endif
    if (!losses) {
      net.forward(b.n, b.x.data(), b.labels.data(), false);
      losses = net.losses();
      probs = net.probs();
    }
    for (int i = 0; i < b.n; ++i) sums[0] += losses[i];
    count_correct(b.n, net.classes(), probs, b.labels.data(), sums[1], sums[2]);
    sums[3] += b.n;
  }
  sum_over_ranks(sums, 4);
  EvalResult r;
  r.samples = (long long)sums[3];
  if (sums[3] > 0) {
    r.loss = sums[0] / sums[3];
    r.top1 = sums[1] / sums[3];
    r.top5 = sums[2] / sums[3];
  }
  return r;
}

Dims input_dims(const DatasetMeta& meta, const AugmentSpec& a) {
  return {int(meta.shape.channels), a.crop ? a.crop : int(meta.shape.height), a.crop ? a.crop : int(meta.shape.width)};
}

void check_classes(const Net& net, const DatasetMeta& meta, const std::string& dir) {
  if (size_t(net.classes()) != meta.classes.size())
    fail_file(join_path(dir, kDatasetJson), "has " + std::to_string(meta.classes.size()) +
                                                 " classes but the net's last fc layer has " +
                                                 std::to_string(net.classes()) + " outputs");
}

[[maybe_unused]] int local_rank() {
  MPI_Comm node;
  int r = 0;
  CONVOY_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  CONVOY_MPI_CHECK(MPI_Comm_rank(node, &r));
  CONVOY_MPI_CHECK(MPI_Comm_free(&node));
  return r;
}

// cpu | cuda | auto -> whether this run trains on the GPU; a GPU asked for but absent is an error.
bool use_gpu(const std::string& device) {
  int gpus = 0;
#ifdef CONVOY_HAVE_CUDA
  gpus = gpu_count();
#endif
  if (device == "cuda" && gpus == 0)
#ifdef CONVOY_HAVE_CUDA
    fail("--device cuda: no CUDA device is visible to this process");
#else
    fail("--device cuda: this build has only the CPU backend (nvcc was not found when it was built)");
#endif
  return device == "cuda" || (device == "auto" && gpus > 0);
}

uint64_t step_key(uint64_t seed, long long global_step) {
  return dropout_step_key(seed, global_step);
}

// Stops the run at the step (0-based over the run, as global_step before it) whose loss was not
// finite; `loss` is this rank's, finite where only another rank's was not.
[[noreturn]] void fail_nonfinite(long long step, long long per_epoch, double loss) {
  const char* what = std::isnan(loss) ? "nan" : std::isinf(loss) ? (loss > 0 ? "inf" : "-inf") : "not finite on another rank";
  fail("step " + std::to_string(step + 1) + " (epoch " + std::to_string(step / per_epoch + 1) + "): the loss is " +
       what + "; stopping (--skip-nonfinite skips such steps)");
}

}  // namespace

int run_training(const TrainOptions& o, int rank, int ranks) {
  g_signal.store(0);
  set_threads(o.threads, ranks);
  Checkpoint resume;
  NetConfig cfg;
  if (!o.resume.empty()) {
    resume = read_checkpoint(o.resume);
    try {
      cfg = parse_net_config(resume.info.at("config_text").get<std::string>(), resume.info.at("config_path").get<std::string>());
    } catch (const nlohmann::json::exception& e) {
      fail_file(o.resume, std::string("checkpoint metadata: ") + e.what());
    }
  } else {
    cfg = read_net_config(o.config);
  }
  TrainRecipe& rec = cfg.train;
  if (o.epochs > 0) rec.epochs = o.epochs;
  if (o.batch > 0) rec.batch = o.batch;
  uint64_t seed = o.seed;
  if (!o.resume.empty()) {
    seed = resume.info.at("seed").get<uint64_t>();
    rec.batch = resume.info.at("batch").get<int>();
    if (o.epochs <= 0) rec.epochs = resume.info.at("epochs").get<int>();
  }

  if (o.print_net) {
    Dims in{cfg.input_c, cfg.input_h, cfg.input_w};
    if (!o.data.empty()) in = input_dims(read_dataset_meta(o.data), cfg.augment);
    if (in.c <= 0) fail_file(cfg.path, "--print-net without --data needs [net] input = [c, h, w]");
    Net net(cfg, in, o.data.empty() ? 0 : int(read_dataset_meta(o.data).classes.size()));
    if (rank == 0) std::printf("%s: %s\n%s", cfg.path.c_str(), cfg.name.c_str(), net.summary().c_str());
    return 0;
  }

  if (rec.batch % ranks != 0)
    fail("--batch " + std::to_string(rec.batch) + " must be a multiple of the number of ranks (" + std::to_string(ranks) + ")");
  const int local_batch = rec.batch / ranks;
  const DatasetMeta meta = read_dataset_meta(o.data);
  LoaderOptions lo;
  lo.dir = o.data;
  lo.local_batch = local_batch;
  lo.prefetch = o.prefetch;
  lo.window_files = o.window_files;
  lo.seed = seed;
  lo.rank = rank;
  lo.ranks = ranks;
  lo.augment = cfg.augment;
  // The CUDA backend takes the augmented uint8 samples and normalises them on the GPU; its host
  // thread needs a core of its own, the CPU backend's compute threads all of theirs.
  const bool on_gpu = use_gpu(o.device);
  lo.raw = on_gpu;
  const ReaderChoice readers = choose_readers(o.readers, on_gpu ? 1 : omp_get_max_threads(), o.local_ranks);
  lo.readers = readers.readers;
  Loader train_loader(lo, meta);
  log_info("loader: %s; prefetch window %d batches, %d files held; buffers at most %.0f MiB (files x largest file + "
           "(window + 2) x batch + readers x sample)",
           readers.why.c_str(), train_loader.prefetch(), train_loader.max_files(),
           double(train_loader.memory_bound()) / (1 << 20));
  std::unique_ptr<Loader> val_loader;
  if (!o.val.empty()) {
    const DatasetMeta vmeta = read_dataset_meta(o.val);
    if (!(vmeta.shape == meta.shape))
      fail_file(join_path(o.val, kDatasetJson), "image shape differs from the training data's");
    if (vmeta.classes != meta.classes)
      fail_file(join_path(o.val, kDatasetJson), "class names differ from the training data's (" +
                                                      std::to_string(vmeta.classes.size()) + " vs " +
                                                      std::to_string(meta.classes.size()) + " classes)");
    LoaderOptions vo = lo;
    vo.dir = o.val;
    vo.train = false;
    // Normalise the validation data with the training data's statistics, as the net was trained.
    DatasetMeta vm = vmeta;
    vm.mean = meta.mean;
    vm.std = meta.std;
    val_loader = std::make_unique<Loader>(vo, vm);
  }

  Net net(cfg, input_dims(meta, cfg.augment), int(meta.classes.size()));
  check_classes(net, meta, o.data);
  net.set_profiling(o.profile);
  net.init_weights(seed);
  Optimizer opt(rec, net.weights().size());
  int start_epoch = 0;
  long long start_step = 0, global_step = 0;
  double carried[3] = {0, 0, 0};  // the interrupted epoch's loss sum, correct, samples
  long long carried_skipped = 0;  // and its steps skipped for a non-finite loss
  if (!o.resume.empty()) {
    if (resume.weights.size() != net.weights().size() || resume.state.size() != net.state().size() ||
        resume.m.size() != opt.m.size() || resume.v.size() != opt.v.size())
      fail_file(o.resume, "checkpoint arrays do not match the net built from its config");
    net.weights() = resume.weights;
    net.state() = resume.state;
    opt.m = resume.m;
    opt.v = resume.v;
    opt.t = resume.info.at("opt_t").get<long long>();
    start_epoch = resume.info.at("epoch").get<int>();
    start_step = resume.info.at("step").get<long long>();
    global_step = resume.info.at("global_step").get<long long>();
    auto sums = resume.info.at("epoch_sums");
    for (int i = 0; i < 3; ++i) carried[i] = sums.at(i).get<double>();
    carried_skipped = resume.info.value("epoch_skipped", 0LL);
  }
  // The readers start on the first epoch's files now, while the GPU (if any) sets itself up.
  if (start_epoch < rec.epochs) train_loader.start_epoch(start_epoch, start_step);
  // Every rank starts from rank 0's weights (each rank may have initialised or read its own).
  if (ranks > 1) {
    broadcast_floats(net.weights());
    broadcast_floats(net.state());
    broadcast_floats(opt.m);
    broadcast_floats(opt.v);
  }

  GpuStepPtr gpu;
  [[maybe_unused]] const long long gpu_first_step = global_step;  // GpuStep counts its steps from 0
  double gpu_setup_s = 0;  // building the step: context, handles, arena, weights up
  if (on_gpu) {
#ifdef CONVOY_HAVE_CUDA
    const int device = local_rank() % gpu_count();
    gpu::GpuStepOptions go;
    go.math = o.precision == "fp32"   ? gpu::MathMode::fp32
              : o.precision == "bf16" ? gpu::MathMode::bf16
                                      : gpu::MathMode::tf32;
    go.graph = o.cuda_graph;
    go.space_to_depth = o.space_to_depth;
    go.skip_nonfinite = o.skip_nonfinite;
    go.profile = o.profile;
    go.workspace_bytes = size_t(o.cudnn_workspace_mb) << 20;
    go.algos = o.cudnn_algos == "measure"   ? gpu::AlgoSearch::measure
               : o.cudnn_algos == "fastest" ? gpu::AlgoSearch::fastest
                                            : gpu::AlgoSearch::heuristic;
    Stopwatch setup_clock;
    gpu = std::make_unique<gpu::GpuStep>(device, net, opt, train_loader.augmenter(), std::max(local_batch, 1), rank,
                                         ranks, go);
    gpu_setup_s = setup_clock.seconds();
    log_info("CUDA backend on %s (rank 0, set up in %.2f s), %.0f MiB of tensors in one arena, %s math, %s convolution algorithms%s, %s%s",
             gpu->device_name(), gpu_setup_s, double(gpu->arena_bytes()) / (1 << 20), o.precision.c_str(), o.cudnn_algos.c_str(),
             gpu->input_space_to_depth() ? ", input as 2x2 pixel blocks (space to depth)" : "",
             o.cuda_graph ? "step captured as a CUDA graph" : "step queued op by op",
             ranks > 1 ? ", gradients averaged with NCCL in buckets overlapping the backward pass" : "");
#endif
  }

  PlanOptions plan{seed, 0, rank, ranks, true, o.window_files};
  const long long per_epoch = steps_per_epoch(meta, plan, local_batch);
  if (per_epoch == 0)
    fail_file(o.data, "too few samples for one batch of " + std::to_string(local_batch) + " per rank");
  const long long total = per_epoch * rec.epochs;
  log_info("%s: %zu parameters, %.1f MFLOPs/image; %llu training samples, %d rank(s) x %d threads (BLAS %s), batch %d (%d per rank), %lld steps/epoch",
           cfg.path.c_str(), net.weights().size(), net.flops_per_image() / 1e6, (unsigned long long)meta.num_samples,
           ranks, omp_get_max_threads(), blas_core_name(), rec.batch, local_batch, per_epoch);

  std::unique_ptr<MetricsLog> metrics;
  if (rank == 0 && !o.metrics.empty()) metrics = std::make_unique<MetricsLog>(o.metrics, !o.resume.empty());
  if (metrics && gpu) metrics->write({{"kind", "setup"}, {"gpu_setup_seconds", gpu_setup_s}});
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);

  // `epoch` and `step` are where a resumed run starts.
  auto save = [&](int epoch, long long step, const double* sums, long long skipped) {
    if (o.checkpoint.empty()) return;
#ifdef CONVOY_HAVE_CUDA
    if (gpu) gpu->sync_to(net, opt);
#endif
    if (rank != 0) return;
    Checkpoint c;
    c.info = {{"config_text", cfg.text}, {"config_path", cfg.path}, {"seed", seed}, {"batch", rec.batch},
              {"epochs", rec.epochs}, {"epoch", epoch}, {"step", step}, {"global_step", global_step},
              {"opt_t", opt.t}, {"epoch_sums", {sums[0], sums[1], sums[2]}}, {"epoch_skipped", skipped},
              {"ranks", ranks}, {"data", o.data}};
    c.weights = net.weights();
    c.state = net.state();
    c.m = opt.m;
    c.v = opt.v;
    write_checkpoint(o.checkpoint, c);
    log_info("checkpoint %s at step %lld", o.checkpoint.c_str(), global_step);
  };

  // The CUDA backend checks each step's loss on the GPU and the host learns of a non-finite one
  // when it waits for that step: at most two steps later, and before any checkpoint. Without
  // --skip-nonfinite the run stops there, its last checkpoint left as it was.
  [[maybe_unused]] auto check_gpu_loss = [&] {
#ifdef CONVOY_HAVE_CUDA
    if (!gpu || o.skip_nonfinite) return;
    const gpu::NonFiniteStep bad = gpu->first_nonfinite();
    if (bad.step >= 0) fail_nonfinite(gpu_first_step + bad.step, per_epoch, bad.loss);
#endif
  };
  // The CUDA backend keeps the training metrics on the GPU: they join the epoch's sums when the
  // sums are read (log lines, checkpoints, the end of an epoch). Returns the last step's loss.
  auto fold_gpu_metrics = [&]([[maybe_unused]] double* sums, [[maybe_unused]] long long& skipped) -> double {
#ifdef CONVOY_HAVE_CUDA
    if (gpu) {
      const gpu::StepMetrics m = gpu->take_metrics();
      check_gpu_loss();
      sums[0] += m.loss_sum;
      sums[1] += m.hits;
      sums[2] += m.samples;
      skipped += m.skipped;
      return m.last_loss;
    }
#endif
    return 0;
  };

  EvalResult last;
  bool have_eval = false;
  HostBatch b;
  std::vector<float> state_before;  // CPU backend, --skip-nonfinite: the running statistics before a step
  for (int epoch = start_epoch; epoch < rec.epochs; ++epoch) {
    const long long first = epoch == start_epoch ? start_step : 0;
    double sums[3] = {0, 0, 0};
    long long skipped = epoch == start_epoch ? carried_skipped : 0;  // steps with a non-finite loss
    if (epoch == start_epoch) std::copy(carried, carried + 3, sums);
    double t_io = 0, t_h2d = 0, t_fwd = 0, t_bwd = 0, t_update = 0, t_comm = 0;
    Stopwatch epoch_clock, lap;
    // Started before: the first epoch before the GPU's set-up, a later one before the evaluation
    // of the epoch before it, so that its first batches are built while the evaluation runs.
    for (long long step = first; step < per_epoch; ++step) {
      lap.reset();
      if (!train_loader.next(b)) fail("loader ended early (internal error)");
      t_io += lap.lap();
      const double lr = lr_at(rec, global_step, total, per_epoch);
      double loss = 0;
#ifdef CONVOY_HAVE_CUDA
      if (gpu) {
        // One call queues the whole step on the GPU and returns; the GPU keeps the metrics, and
        // the phases are timed there with events.
        gpu->train(b, step_key(seed, global_step), lr);
        check_gpu_loss();
      }
#endif
      if (!gpu) {
        if (o.skip_nonfinite) state_before = net.state();  // batch norm's running statistics
        loss = net.forward(b.n, b.x.data(), b.labels.data(), true, step_key(seed, global_step), b.keys.data());
        t_fwd += lap.lap();
        bool finite = std::isfinite(loss);
        if (ranks > 1) finite = !any_rank(!finite);  // one rank's non-finite loss stops or skips the step on all
        if (finite) {
          net.backward();
          t_bwd += lap.lap();
          if (ranks > 1) average_gradients(net.grads(), ranks);
          t_comm += lap.lap();
          opt.step(net.weights(), net.grads(), lr);
          t_update += lap.lap();
          double top1 = 0, top5 = 0;
          count_correct(b.n, net.classes(), net.probs(), b.labels.data(), top1, top5);
          sums[0] += loss * b.n;
          sums[1] += top1;
          sums[2] += b.n;
        } else if (o.skip_nonfinite) {
          // As on the GPU: no update and the running statistics as they were, but the step
          // counts (the learning-rate schedule, Adam's t).
          net.state() = state_before;
          ++opt.t;
          ++skipped;
        } else {
          fail_nonfinite(global_step, per_epoch, loss);
        }
      }
      ++global_step;
      if (o.log_every > 0 && (step + 1) % o.log_every == 0) {
        if (gpu) loss = fold_gpu_metrics(sums, skipped);
        log_info("epoch %d step %lld/%lld loss %.4f lr %.5f %.0f img/s", epoch + 1, step + 1, per_epoch, loss, lr,
                 double((step + 1 - first) * rec.batch) / epoch_clock.seconds());
        if (metrics)
          metrics->write({{"kind", "step"}, {"epoch", epoch + 1}, {"step", step + 1}, {"global_step", global_step},
                          {"loss", loss}, {"lr", lr}});
      }
      bool stop = g_signal.load() != 0 || (o.stop_after > 0 && global_step >= o.stop_after);
      if (ranks > 1) stop = any_rank(stop);
      const bool at_end = step + 1 == per_epoch;
      if (stop || (o.checkpoint_every > 0 && global_step % o.checkpoint_every == 0 && !at_end)) {
        fold_gpu_metrics(sums, skipped);
        double total_sums[3] = {sums[0], sums[1], sums[2]};
        if (ranks > 1) sum_over_ranks(total_sums, 3);
        // Saved per rank share: on resume each rank's sums restart from the global figure / ranks.
        for (double& s : total_sums) s /= ranks;
        if (at_end)
          save(epoch + 1, 0, std::array<double, 3>{0, 0, 0}.data(), 0);
        else
          save(epoch, step + 1, total_sums, skipped);
      }
      if (stop) {
        if (o.profile && rank == 0) std::fprintf(stderr, "%s", net.profile().c_str());
        const int sig = g_signal.load();
        if (sig)
          log_info("stopped by signal %d after step %lld", sig, global_step);
        else
          log_info("stopped after step %lld", global_step);
        return sig ? 128 + sig : 0;
      }
    }
    if (epoch + 1 < rec.epochs) train_loader.start_epoch(epoch + 1, 0);
    fold_gpu_metrics(sums, skipped);
    if (ranks > 1) sum_over_ranks(sums, 3);
    [[maybe_unused]] double t_idle = 0;
#ifdef CONVOY_HAVE_CUDA
    if (gpu) {
      // GPU phases come from CUDA events. t_h2d is the time the GPU waited for a batch's copy,
      // t_comm the all-reduce not hidden behind the backward pass, t_idle the time it waited for
      // the host to queue a step.
      const gpu::StepTimes g = gpu->take_times();
      t_h2d = g.h2d, t_fwd = g.fwd, t_bwd = g.bwd, t_comm = g.comm, t_update = g.update, t_idle = g.idle;
    }
#endif
    const double train_s = epoch_clock.seconds();
    const double train_loss = sums[0] / std::max(1.0, sums[2]), train_acc = sums[1] / std::max(1.0, sums[2]);
    std::string val_text;
    if (val_loader) {
      last = evaluate(net, *val_loader, gpu);
      have_eval = true;
      char buf[160];
      std::snprintf(buf, sizeof buf, " | test loss %.4f top-1 %.4f top-5 %.4f", last.loss, last.top1, last.top5);
      val_text = buf;
    }
    const double secs = epoch_clock.seconds();
    char skip_text[64] = "";
    if (o.skip_nonfinite) std::snprintf(skip_text, sizeof skip_text, " | %lld steps skipped (loss not finite)", skipped);
    log_info("epoch %d/%d: loss %.4f train acc %.4f%s%s | %.1f s (train %.1f s, %.0f img/s)", epoch + 1, rec.epochs,
             train_loss, train_acc, val_text.c_str(), skip_text, secs, train_s, sums[2] / train_s);
#ifdef CONVOY_HAVE_CUDA
    if (gpu) gpu->add_profile_to(net);
#endif
    if (o.profile && rank == 0) std::fprintf(stderr, "%s", net.profile().c_str());
    char idle[48] = "";
    if (gpu) std::snprintf(idle, sizeof idle, ", t_idle %.2f s", t_idle);
    log_info("epoch %d breakdown: t_io %.2f s, t_h2d %.2f s, t_fwd %.2f s, t_bwd %.2f s, t_update %.2f s, t_comm %.2f s%s"
             "; input stall %.2f %%, peak RSS %.0f MiB",
             epoch + 1, t_io, t_h2d, t_fwd, t_bwd, t_update, t_comm, idle, 100 * t_io / train_s,
             double(peak_rss_bytes()) / (1 << 20));
    if (metrics) {
      nlohmann::json j = {{"kind", "epoch"}, {"epoch", epoch + 1}, {"global_step", global_step}, {"train_loss", train_loss},
                          {"train_acc", train_acc}, {"seconds", secs}, {"train_seconds", train_s},
                          {"t_io", t_io}, {"t_h2d", t_h2d}, {"t_fwd", t_fwd}, {"t_bwd", t_bwd},
                          {"t_update", t_update}, {"t_comm", t_comm}, {"images_per_second", sums[2] / train_s},
                          {"input_stall", t_io / train_s}, {"peak_rss_bytes", peak_rss_bytes()},
                          {"skipped_steps", skipped}};
    if (gpu) j["t_idle"] = t_idle;
      if (have_eval) {
        j["test_loss"] = last.loss;
        j["test_top1"] = last.top1;
        j["test_top5"] = last.top5;
      }
      metrics->write(j);
    }
  }
  const double zero[3] = {0, 0, 0};
  save(rec.epochs, 0, zero, 0);
  if (have_eval && rank == 0) {
    std::printf("test accuracy: %.4f\n", last.top1);
    std::fflush(stdout);
  }
  return 0;
}

int run_eval(const EvalOptions& o, int rank, int ranks) {
  set_threads(o.threads, ranks);
  const Checkpoint c = read_checkpoint(o.checkpoint);
  NetConfig cfg;
  try {
    cfg = parse_net_config(c.info.at("config_text").get<std::string>(), c.info.at("config_path").get<std::string>());
  } catch (const nlohmann::json::exception& e) {
    fail_file(o.checkpoint, std::string("checkpoint metadata: ") + e.what());
  }
  const DatasetMeta meta = read_dataset_meta(o.data);
  Net net(cfg, input_dims(meta, cfg.augment), int(meta.classes.size()));
  check_classes(net, meta, o.data);
  if (c.weights.size() != net.weights().size() || c.state.size() != net.state().size())
    fail_file(o.checkpoint, "checkpoint arrays do not match the net built from its config");
  net.weights() = c.weights;
  net.state() = c.state;
  LoaderOptions lo;
  lo.dir = o.data;
  lo.local_batch = o.batch;
  lo.readers = choose_readers(o.readers, omp_get_max_threads(), o.local_ranks).readers;
  lo.train = false;
  lo.rank = rank;
  lo.ranks = ranks;
  lo.augment = cfg.augment;
  Loader loader(lo, meta);
  Stopwatch clock;
  const EvalResult r = evaluate(net, loader);
  log_info("%s on %s: %lld samples, loss %.4f top-1 %.4f top-5 %.4f (%.1f s)", o.checkpoint.c_str(), o.data.c_str(),
           r.samples, r.loss, r.top1, r.top5, clock.seconds());
  if (rank == 0) {
    std::printf("test accuracy: %.4f\n", r.top1);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace convoy
