// train: trains a CNN described by a TOML config on a datagen dataset folder (CPU or CUDA backend,
// data parallel over MPI ranks), or evaluates a checkpoint with `train eval`.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "input/loader_bench.h"
#include "shared/error.h"
#include "shared/log.h"
#include "shared/mpi_context.h"
#include "train/blas_setup.h"
#include "train/data_parallel.h"
#include "train/flag_ranges.h"
#include "train/gpu_info.h"
#include "train/net_config.h"
#include "train/step.h"
#include "train/synthetic_data.h"
#include "train/trainer.h"

namespace {

// An option that names one of a few choices, parsed straight into its enum (or an optional one,
// left unset when the flag is not given); the help text and the error for any other value are
// CLI::IsMember's.
template <typename E, typename Target>
CLI::Option* add_choice(CLI::App& app, const std::string& flag, Target& value, const convoy::Names<E>& names,
                        const std::string& help) {
  std::vector<std::string> spellings;
  for (const auto& choice : names) spellings.push_back(choice.first);
  auto set = [&value, &names](const std::string& given) {
    for (const auto& [name, e] : names)
      if (name == given) value = e;
  };
  return app.add_option_function<std::string>(flag, set, help)->check(CLI::IsMember(spellings));
}

// --batch N, or auto: the sweep of `train tune-batch` first, then the fastest batch per rank, the lr
// scaled to it (trainer.cpp).
void add_batch_option(CLI::App& app, convoy::TrainOptions& t) {
  CLI::Validator number = convoy::within(1, convoy::kMaxBatch);
  auto check = [number](std::string& given) -> std::string {
    if (given == "auto") return "";
    const std::string why = number(given);
    return why.empty() ? why : why + " (or auto)";
  };
  auto set = [&t](const std::string& given) {
    t.batch_auto = given == "auto";
    if (!t.batch_auto) t.batch = std::stoi(given);
  };
  app.add_option_function<std::string>(
         "--batch", set,
         "global batch size (default: the config's; resuming: the checkpoint's), or auto: time the training step at "
         "each power-of-two batch per rank that fits in memory (as train tune-batch) and train at the fastest, with "
         "lr = config lr x chosen global batch / config batch (a resumed run keeps the batch and lr it chose)")
      ->check(CLI::Validator(check, "", ""));
}

// What a resumed run takes from its checkpoint is refused when given otherwise (run_spec.h).
void add_run_options(CLI::App& app, convoy::TrainOptions& t) {
  using convoy::within;
  app.add_option("--config", t.config, "net and recipe (TOML), e.g. configs/fmnist.toml (resuming: the checkpoint's)");
  app.add_option("--data", t.data, "training dataset folder (datagen output; resuming: the checkpoint's)");
  app.add_option("--val", t.val, "validation dataset folder, evaluated every epoch (resuming: the checkpoint's)");
  app.add_option("--epochs", t.epochs,
                 "epochs (default: the config's; resuming: the checkpoint's, or more to extend it)")
      ->check(within(1, convoy::kMaxEpochs));
  add_batch_option(app, t);
  app.add_option("--seed", t.seed,
                 "seed for weights, order, augmentation and dropout (default 1; resuming: the checkpoint's)")
      ->check(within<uint64_t>(0));
  app.add_option("--threads", t.threads, "compute threads per rank (0, the default: cores / ranks on the node)")
      ->check(within(0));
  app.add_option("--readers", t.readers,
                 "loader threads (0, the default: the cores of this rank's share less the trainer's)")
      ->check(within(0));
  app.add_option("--prefetch", t.prefetch, "batches the loader keeps ready (0: about 64 MiB of them, 4 to 64)")
      ->check(within(0));
  app.add_option("--shuffle-files", t.window_files,
                 "shuffle buffer size in batch files (default 4; resuming: the checkpoint's)")
      ->check(within(1));
  add_choice(app, "--order", t.order, convoy::order_names(),
             "how training's samples are dealt to ranks: local (default) = each rank a contiguous share of the "
             "epoch, reading only about files / ranks batch files; global = the same global batches at any number "
             "of ranks, each rank a slice of every one, so every rank reads every file (resuming: the checkpoint's)");
  app.add_option("--log-every", t.log_every, "a progress line every N steps (0: none)")->check(within(0));
  app.add_option("--metrics", t.metrics, "JSONL file of every metric (appended to when resuming)");
  app.add_option("--checkpoint", t.checkpoint,
                 "checkpoint path, written at the end, on SIGINT/SIGTERM and every --checkpoint-every steps "
                 "(resuming: the one resumed from)");
  app.add_option("--checkpoint-every", t.checkpoint_every,
                 "steps between checkpoints (0: only at the end and on signals)")
      ->check(within<long long>(0));
  app.add_option("--resume", t.resume, "continue exactly from this checkpoint, with its config, data and settings");
  app.add_option("--stop-after", t.stop_after,
                 "stop after this many steps in all (writes the checkpoint; at an epoch's last step, after the "
                 "epoch's evaluation)")
      ->check(within<long long>(1));
}

void add_backend_options(CLI::App& app, convoy::BackendOptions& b) {
  add_choice(app, "--device", b.device, convoy::device_names(),
             "cpu | cuda | auto (default: a GPU when one is visible)");
  app.add_flag("!--no-cuda-graph", b.cuda_graph,
               "CUDA backend: queue each step op by op instead of replaying a captured graph");
  add_choice(app, "--input-fold", b.input_fold, convoy::input_fold_names(),
             "CUDA backend, bf16: how a first convolution of few channels (ResNet's 7x7/2 stem, a gray 3x3/1 one) "
             "reads its input: patches = each output pixel's window as one row (a 1x1 convolution), blocks = 2x2 "
             "pixel blocks as 16 channels (stride 2), none = 3 channels padded to 8");
  add_choice(app, "--cudnn-algos", b.conv_algos, convoy::conv_algos_names(),
             "CUDA backend: heuristic = deterministic convolution algorithms by cuDNN's ranking (runs repeat bit for "
             "bit); measure = deterministic ones timed at start (the choice, and so the last bits, may differ between "
             "runs); fastest = timed, non-deterministic ones allowed (as PyTorch's cudnn.benchmark)");
  app.add_option("--cudnn-workspace", b.cudnn_workspace_mb,
                 "CUDA backend: cuDNN workspace in MiB (16 to 65536), allocated once; larger admits faster convolution "
                 "algorithms")
      ->check(convoy::within(16, 65536));
  add_choice(app, "--grad-comm", b.grad_comm, convoy::grad_comm_names(),
             "CUDA backend, several ranks: the gradients' all-reduce in bf16 (half the bytes: summed in bf16, "
             "divided by the ranks in fp32), fp32 (averaged in fp32) or fp8 (a quarter: e4m3 scaled per bucket "
             "by its largest magnitude on any rank in the step before, summed in fp8; Hopper GPUs or newer) or "
             "int4 (0.56 of a byte a gradient each way: blocks of 32 at 4 bits, fp4's magnitudes, with their own "
             "scale, rounded stochastically, dealt to their owners, summed there in fp32 and sent back the same "
             "way) or fp8-int4 (fp8's reduce-scatter, then the owners' sums back as int4 blocks); "
             "auto (default): fp32 with --precision fp32, else fp8 where the ranks span hosts (as NCCL sees them: "
             "NCCL_HOSTID) and every GPU sums fp8, else bf16. Weights and optimiser state stay fp32 either way");
  app.add_option("--bucket-mb", b.bucket_mb,
                 "CUDA backend, several ranks: all-reduce bucket size in MiB of fp32 gradients, half that on the "
                 "wire in bf16, a quarter in fp8 (the last buckets of the backward pass are smaller); default 8, "
                 "32 with fp8, int4 and fp8-int4")
      ->check(convoy::within(0.0625, 1024.0));
  app.add_flag("!--no-bucket-updates", b.bucket_updates,
               "CUDA backend, several ranks: update the weights once after the last all-reduce instead of each "
               "bucket's as its all-reduce ends (the same result, bit for bit)");
  add_choice(app, "--precision", b.precision, convoy::precision_names(),
             "CUDA backend: fp32, tf32 (tensor cores for conv and fc) or bf16 (bf16 NHWC activations and "
             "gradients on the tensor cores, fp32 master weights, gradients and optimiser state)");
}

void add_run_flags(CLI::App& app, convoy::TrainOptions& t) {
  app.add_flag("--skip-nonfinite", t.skip_nonfinite,
               "skip a step whose loss is NaN or infinite (no update; counted as skipped_steps) instead of stopping "
               "the run with an error");
  app.add_flag("--profile", t.profile, "print per-layer forward/backward seconds after each epoch");
  app.add_flag("--print-net", t.print_net, "print layers, output shapes, parameters and FLOPs per image, then exit");
}

CLI::App* add_eval(CLI::App& app, convoy::EvalOptions& e) {
  CLI::App* ev = app.add_subcommand("eval", "evaluate a checkpoint on a dataset");
  ev->add_option("--checkpoint", e.checkpoint, "checkpoint to evaluate")->required();
  ev->add_option("--data", e.data, "dataset folder")->required();
  ev->add_option("--batch", e.batch, "batch size per rank")->check(convoy::within(1, convoy::kMaxBatch));
  ev->add_option("--threads", e.threads, "compute threads (0, the default: cores / ranks on the node)")
      ->check(convoy::within(0));
  ev->add_option("--readers", e.readers,
                 "loader threads (0, the default: the cores of this rank's share less the compute threads)")
      ->check(convoy::within(0));
  return ev;
}

// What makes the step faster or slower is the run's: the backend flags, threads and readers.
CLI::App* add_tune_batch(CLI::App& app, convoy::TrainOptions& t) {
  using convoy::within;
  CLI::App* tb = app.add_subcommand(
      "tune-batch",
      "time the training step at each power-of-two batch per rank that fits in memory (the GPU's, or half of the "
      "CPU's MemAvailable over the ranks on a node), print the table, the fastest batch (ties within 1 % to the "
      "smaller), the lr --batch auto would scale to it and seed 002's HPL-derived size beside it");
  tb->add_option("--config", t.config, "net and recipe (TOML)")->required();
  tb->add_option("--data", t.data, "training dataset folder (datagen output): its samples feed the steps")->required();
  tb->add_option("--seed", t.seed, "seed for the weights and the samples taken (default 1)")
      ->check(within<uint64_t>(0));
  tb->add_option("--threads", t.threads, "compute threads per rank (0, the default: cores / ranks on the node)")
      ->check(within(0));
  tb->add_option("--readers", t.readers, "loader threads (0, the default: as a training run chooses)")
      ->check(within(0));
  add_backend_options(*tb, t.backend);
  return tb;
}

struct SynthArgs {
  std::string out, encoding = "raw";
  int files = 8, per_file = 64, last = 0, size = 8, channels = 1, classes = 4;
  uint64_t seed = 1;
};

// The sides and counts datagen allows (datagen/run_options.cpp), and a file of at most 4 GiB, which
// synth holds whole in memory.
CLI::App* add_synth(CLI::App& app, SynthArgs& a) {
  using convoy::within;
  CLI::App* syn = app.add_subcommand("synth", "write a small synthetic dataset (for smoke tests and benchmarks)");
  syn->add_option("--out", a.out, "dataset folder to write")->required();
  syn->add_option("--files", a.files, "batch files")->check(within(1, 1 << 20));
  syn->add_option("--per-file", a.per_file, "samples per batch file")->check(within(1, 1 << 20));
  syn->add_option("--last", a.last, "samples in the last file (0: --per-file)")->check(within(0, 1 << 20));
  syn->add_option("--size", a.size, "image side in pixels")->check(within(1, 16384));
  syn->add_option("--channels", a.channels, "1 or 3")->check(CLI::IsMember({1, 3}));
  syn->add_option("--classes", a.classes, "number of classes")->check(within(1));
  syn->add_option("--encoding", a.encoding, "raw | jpeg")->check(CLI::IsMember({"raw", "jpeg"}));
  syn->add_option("--seed", a.seed, "seed")->check(within<uint64_t>(0));
  return syn;
}

int run_synth(const SynthArgs& a, int rank) {
  if (a.last > a.per_file)
    convoy::fail("--last " + std::to_string(a.last) + " must not exceed --per-file " + std::to_string(a.per_file));
  if (double(a.per_file) * a.size * a.size * a.channels > double(4ull << 30))
    convoy::fail("--per-file " + std::to_string(a.per_file) + " at --size " + std::to_string(a.size) +
                 " makes batch files over 4 GiB, which synth holds whole in memory");
  convoy::SyntheticSpec spec;
  spec.file_counts.assign(size_t(a.files), uint32_t(a.per_file));
  if (a.last > 0) spec.file_counts.back() = uint32_t(a.last);
  spec.shape = {uint32_t(a.size), uint32_t(a.size), uint32_t(a.channels)};
  spec.classes = a.classes;
  spec.encoding = convoy::parse_encoding(a.encoding);
  spec.seed = a.seed;
  if (rank == 0) convoy::write_synthetic_dataset(a.out, spec);
  return 0;
}

struct BenchLoaderArgs {
  convoy::LoaderBenchOptions o;
  bool no_flip = false, eval = false;
};

CLI::App* add_bench_loader(CLI::App& app, BenchLoaderArgs& a) {
  using convoy::within;
  convoy::LoaderBenchOptions& lbo = a.o;
  CLI::App* lb = app.add_subcommand("bench-loader", "time the loader alone (no net) in raw and float mode");
  lb->add_option("--data", lbo.data, "dataset folder")->required();
  lb->add_option("--mode", lbo.mode, "raw (CUDA backend) | float (CPU backend) | both")
      ->check(CLI::IsMember({"raw", "float", "both"}));
  lb->add_option("--batch", lbo.batch, "batch size")->check(within(1));
  lb->add_option("--readers", lbo.readers, "loader threads (0, the default: every core this process may use)")
      ->check(within(0));
  lb->add_option("--prefetch", lbo.prefetch, "batches the loader keeps ready (0: about 64 MiB of them, 4 to 64)")
      ->check(within(0));
  lb->add_option("--shuffle-files", lbo.window_files, "shuffle buffer size in batch files")->check(within(1));
  lb->add_option("--epochs", lbo.epochs, "epochs per mode (the first is left out of the median)")->check(within(1));
  lb->add_option("--crop", lbo.augment.crop, "crop side (0: the stored size)")->check(within(0));
  lb->add_option("--pad", lbo.augment.pad, "zero padding before the random crop")->check(within(0));
  lb->add_flag("--random-resized-crop", lbo.augment.random_resized_crop,
               "torchvision's RandomResizedCrop to --crop instead of a window");
  lb->add_flag("--no-flip", a.no_flip, "no random horizontal flip");
  lb->add_flag("--eval", a.eval, "the evaluation pass: file order, centred crop, partial last batch");
  lb->add_option("--eval-resize", lbo.augment.eval_resize,
                 "with --eval: the short side to this before the centred crop")
      ->check(within(0));
  lb->add_flag("--mirror", lbo.mirror,
               "raw mode: mirror the samples in the loader (flips all 0), as the Python module does");
  lb->add_option("--rank", lbo.rank, "the share of this rank (with --ranks)")->check(within(0));
  lb->add_option("--ranks", lbo.ranks, "ranks the dataset is dealt to")->check(within(1));
  add_choice(*lb, "--order", lbo.order, convoy::order_names(), "how samples are dealt to ranks: local | global");
  lb->add_option("--seed", lbo.seed, "seed")->check(within<uint64_t>(0));
  lb->add_option("--step-us", lbo.step_us,
                 "microseconds the consumer spends per batch, spinning as a host waiting for a GPU step does")
      ->check(within(0.0));
  lb->add_flag("--digest", lbo.digest, "print a checksum of each epoch's batches (the same for any --readers)");
  return lb;
}

int run_bench_loader(BenchLoaderArgs& a, const convoy::MpiContext& mpi) {
  a.o.local_ranks = mpi.local_size();
  a.o.augment.flip = !a.no_flip;
  a.o.train = !a.eval;
  if (a.o.rank >= a.o.ranks) convoy::fail("--rank must be less than --ranks");
  return mpi.rank() == 0 ? convoy::run_loader_bench(a.o) : 0;
}

// What --grad-comm auto is resolved for (train_options.h): whether the ranks span hosts and, if so,
// whether every rank's GPU and NCCL sum fp8 (asked of the GPUs only then).
convoy::CommReach comm_reach(const convoy::TrainOptions& t, const convoy::MpiContext& mpi) {
  convoy::CommReach r;
  r.hosts = mpi.hosts();
  if (r.hosts > 1) r.fp8 = !convoy::any_rank(!convoy::fp8_wire_supported(t.backend.device, t.local_rank));
  return r;
}

int start_tune_batch(convoy::TrainOptions& t, const convoy::MpiContext& mpi) {
  t.local_rank = mpi.local_rank();
  t.local_ranks = mpi.local_size();
  t.reach = comm_reach(t, mpi);
  t.batch_auto = true;
  return convoy::run_tune_batch(t, mpi.rank(), mpi.size());
}

int start_training(convoy::TrainOptions& t, const convoy::MpiContext& mpi) {
  t.local_rank = mpi.local_rank();
  t.local_ranks = mpi.local_size();
  t.reach = comm_reach(t, mpi);
  if (t.config.empty() && t.resume.empty()) convoy::fail("--config is required (or --resume)");
  if (t.data.empty() && t.resume.empty() && !t.print_net) convoy::fail("--data is required (or --resume)");
  // A resumed run saves to the checkpoint it resumed from unless --checkpoint names another.
  if (t.checkpoint_every > 0 && t.checkpoint.empty() && t.resume.empty())
    convoy::fail("--checkpoint-every " + std::to_string(t.checkpoint_every) +
                 " needs --checkpoint (the file to write)");
  return convoy::run_training(t, mpi.rank(), mpi.size());
}

// The command line: every option's target and the subcommands.
struct Command {
  convoy::TrainOptions t;
  convoy::EvalOptions e;
  convoy::TrainOptions tune;
  SynthArgs syn_args;
  BenchLoaderArgs lb_args;
  bool list_gpus = false;
  CLI::App app{"train: CNN training on convoy batch files"};
  CLI::App *ev = nullptr, *syn = nullptr, *lb = nullptr, *tb = nullptr;

  Command() {
    add_run_options(app, t);
    add_backend_options(app, t.backend);
    app.add_flag("--gpus", list_gpus, "print the number of GPUs this build can use, then exit");
    add_run_flags(app, t);
    ev = add_eval(app, e);
    syn = add_synth(app, syn_args);
    lb = add_bench_loader(app, lb_args);
    tb = add_tune_batch(app, tune);
  }
};

int run(Command& c, convoy::MpiContext& mpi) {
  if (c.list_gpus) {
    if (mpi.rank() == 0) std::printf("%d\n", convoy::gpu_count());
    return 0;
  }
  if (*c.lb) return run_bench_loader(c.lb_args, mpi);
  if (*c.ev) {
    c.e.local_ranks = mpi.local_size();
    return convoy::run_eval(c.e, mpi.rank(), mpi.size());
  }
  if (*c.syn) return run_synth(c.syn_args, mpi.rank());
  if (*c.tb) return start_tune_batch(c.tune, mpi);
  return start_training(c.t, mpi);
}

// The command line is parsed before MPI starts (which takes a while), so that a flag out of its
// range is refused at once.
int body(int argc, char** argv) {
  Command cmd;
  try {
    cmd.app.parse(argc, argv);
  } catch (const CLI::ParseError& err) {
    return cmd.app.exit(err);
  }
  for (const char* flag :
       {"--precision", "--grad-comm", "--input-fold", "--cudnn-algos", "--cudnn-workspace", "--bucket-mb", "--device"})
    if (cmd.app.count(flag) > 0) cmd.t.backend_given.push_back(flag);
  convoy::MpiContext mpi(&argc, &argv);
  convoy::log_setup("train", mpi.rank(), mpi.size());
  try {
    return run(cmd, mpi);
  } catch (const convoy::SetupRefused& e) {
    // Every rank refused the same inputs before any collective step: one line, no abort.
    if (*e.what()) std::fprintf(stderr, "train: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    // The other ranks may be waiting in a collective that this one will never reach.
    if (mpi.size() > 1) {
      std::fprintf(stderr, "train[%d]: error: %s\n", mpi.rank(), e.what());
      std::fflush(stderr);
      mpi.abort(1);
    }
    throw;
  }
}

}  // namespace

int main(int argc, char** argv) {
  convoy::ensure_fast_blas(argv);
  return convoy::run_main("train", body, argc, argv);
}
