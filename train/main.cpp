// train: trains a CNN described by a TOML config on a datagen dataset folder (CPU or CUDA backend,
// data parallel over MPI ranks), or evaluates a checkpoint with `train eval`.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "shared/error.h"
#include "shared/log.h"
#include "shared/mpi_context.h"
#include "train/blas_setup.h"
#include "train/gpu_info.h"
#include "train/loader_bench.h"
#include "train/synthetic_data.h"
#include "train/trainer.h"

namespace {

int run(convoy::MpiContext& mpi, int argc, char** argv);

int body(int argc, char** argv) {
  convoy::MpiContext mpi(&argc, &argv);
  convoy::log_setup("train", mpi.rank(), mpi.size());
  try {
    return run(mpi, argc, argv);
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

int run(convoy::MpiContext& mpi, int argc, char** argv) {
  convoy::TrainOptions t;
  convoy::EvalOptions e;
  CLI::App app{"train: CNN training on convoy batch files"};
  app.add_option("--config", t.config, "net and recipe (TOML), e.g. configs/fmnist.toml");
  app.add_option("--data", t.data, "training dataset folder (datagen output)");
  app.add_option("--val", t.val, "validation dataset folder, evaluated every epoch");
  app.add_option("--epochs", t.epochs, "epochs (default: the config's)");
  app.add_option("--batch", t.batch, "global batch size (default: the config's)");
  app.add_option("--seed", t.seed, "seed for weights, order, augmentation and dropout");
  app.add_option("--threads", t.threads, "compute threads per rank (default: cores / ranks on the node)");
  app.add_option("--readers", t.readers, "loader threads (default: the cores of this rank's share less the trainer's)");
  app.add_option("--prefetch", t.prefetch, "batches the loader keeps ready (0: about 64 MiB of them, 4 to 64)");
  app.add_option("--shuffle-files", t.window_files, "shuffle buffer size in batch files");
  app.add_option("--log-every", t.log_every, "a progress line every N steps (0: none)");
  app.add_option("--metrics", t.metrics, "JSONL file of every metric");
  app.add_option("--checkpoint", t.checkpoint, "checkpoint path, written at the end, on SIGINT/SIGTERM and every --checkpoint-every steps");
  app.add_option("--checkpoint-every", t.checkpoint_every, "steps between checkpoints (0: only at the end and on signals)");
  app.add_option("--resume", t.resume, "continue exactly from this checkpoint");
  app.add_option("--stop-after", t.stop_after, "stop after this many steps in all (writes the checkpoint)");
  app.add_option("--device", t.device, "cpu | cuda | auto (default: a GPU when one is visible)")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  app.add_flag("!--no-cuda-graph", t.cuda_graph, "CUDA backend: queue each step op by op instead of replaying a captured graph");
  app.add_flag("!--no-space-to-depth", t.space_to_depth,
               "CUDA backend, bf16: feed a stride-2 first convolution (ResNet's 7x7 stem) 3 channels padded to 8 "
               "instead of 2x2 pixel blocks as 16 channels");
  app.add_option("--cudnn-algos", t.cudnn_algos,
                 "CUDA backend: heuristic = deterministic convolution algorithms by cuDNN's ranking (runs repeat bit for "
                 "bit); measure = deterministic ones timed at start (the choice, and so the last bits, may differ between "
                 "runs); fastest = timed, non-deterministic ones allowed (as PyTorch's cudnn.benchmark)")
      ->check(CLI::IsMember({"heuristic", "measure", "fastest"}));
  app.add_option("--cudnn-workspace", t.cudnn_workspace_mb,
                 "CUDA backend: cuDNN workspace in MiB, allocated once; larger admits faster convolution algorithms")
      ->check(CLI::Range(16, 65536));
  app.add_option("--precision", t.precision,
                 "CUDA backend: fp32, tf32 (tensor cores for conv and fc) or bf16 (bf16 NHWC activations and "
                 "gradients on the tensor cores, fp32 master weights, gradients and optimiser state)")
      ->check(CLI::IsMember({"fp32", "tf32", "bf16"}));
  bool list_gpus = false;
  app.add_flag("--gpus", list_gpus, "print the number of GPUs this build can use, then exit");
  app.add_flag("--skip-nonfinite", t.skip_nonfinite,
               "skip a step whose loss is NaN or infinite (no update; counted as skipped_steps) instead of stopping "
               "the run with an error");
  app.add_flag("--profile", t.profile, "print per-layer forward/backward seconds after each epoch");
  app.add_flag("--print-net", t.print_net, "print layers, output shapes, parameters and FLOPs per image, then exit");

  CLI::App* ev = app.add_subcommand("eval", "evaluate a checkpoint on a dataset");
  ev->add_option("--checkpoint", e.checkpoint, "checkpoint to evaluate")->required();
  ev->add_option("--data", e.data, "dataset folder")->required();
  ev->add_option("--batch", e.batch, "batch size");
  ev->add_option("--threads", e.threads, "compute threads");
  CLI::App* syn = app.add_subcommand("synth", "write a small synthetic dataset (for smoke tests and benchmarks)");
  std::string syn_out, syn_encoding = "raw";
  int syn_files = 8, syn_per_file = 64, syn_last = 0, syn_size = 8, syn_channels = 1, syn_classes = 4;
  uint64_t syn_seed = 1;
  syn->add_option("--out", syn_out, "dataset folder to write")->required();
  syn->add_option("--files", syn_files, "batch files");
  syn->add_option("--per-file", syn_per_file, "samples per batch file");
  syn->add_option("--last", syn_last, "samples in the last file (0: --per-file)");
  syn->add_option("--size", syn_size, "image side in pixels");
  syn->add_option("--channels", syn_channels, "1 or 3");
  syn->add_option("--classes", syn_classes, "number of classes");
  syn->add_option("--encoding", syn_encoding, "raw | jpeg")->check(CLI::IsMember({"raw", "jpeg"}));
  syn->add_option("--seed", syn_seed, "seed");
  CLI::App* lb = app.add_subcommand("bench-loader", "time the loader alone (no net) in raw and float mode");
  convoy::LoaderBenchOptions lbo;
  lb->add_option("--data", lbo.data, "dataset folder")->required();
  lb->add_option("--mode", lbo.mode, "raw (CUDA backend) | float (CPU backend) | both")
      ->check(CLI::IsMember({"raw", "float", "both"}));
  lb->add_option("--batch", lbo.batch, "batch size");
  lb->add_option("--readers", lbo.readers, "loader threads (default: every core this process may use)");
  lb->add_option("--prefetch", lbo.prefetch, "batches the loader keeps ready (0: about 64 MiB of them, 4 to 64)");
  lb->add_option("--shuffle-files", lbo.window_files, "shuffle buffer size in batch files");
  lb->add_option("--epochs", lbo.epochs, "epochs per mode (the first is left out of the median)");
  lb->add_option("--crop", lbo.crop, "crop side (0: the stored size)");
  lb->add_option("--pad", lbo.pad, "zero padding before the random crop");
  lb->add_flag("--random-resized-crop", lbo.random_resized_crop, "torchvision's RandomResizedCrop to --crop instead of a window");
  bool lb_no_flip = false, lb_eval = false;
  lb->add_flag("--no-flip", lb_no_flip, "no random horizontal flip");
  lb->add_flag("--eval", lb_eval, "the evaluation pass: file order, centred crop, partial last batch");
  lb->add_option("--eval-resize", lbo.eval_resize, "with --eval: the short side to this before the centred crop");
  lb->add_flag("--mirror", lbo.mirror, "raw mode: mirror the samples in the loader (flips all 0), as the Python module does");
  lb->add_option("--rank", lbo.rank, "the share of this rank (with --ranks)")->check(CLI::NonNegativeNumber);
  lb->add_option("--ranks", lbo.ranks, "ranks the dataset is dealt to")->check(CLI::PositiveNumber);
  lb->add_option("--seed", lbo.seed, "seed");
  lb->add_option("--step-us", lbo.step_us,
                 "microseconds the consumer spends per batch, spinning as a host waiting for a GPU step does");
  lb->add_flag("--digest", lbo.digest, "print a checksum of each epoch's batches (the same for any --readers)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& err) {
    return app.exit(err);
  }
  if (list_gpus) {
    if (mpi.rank() == 0) std::printf("%d\n", convoy::gpu_count());
    return 0;
  }
  t.local_ranks = e.local_ranks = lbo.local_ranks = mpi.local_size();
  lbo.flip = !lb_no_flip;
  lbo.train = !lb_eval;
  if (*lb && lbo.rank >= lbo.ranks) convoy::fail("--rank must be less than --ranks");
  if (*lb) return mpi.rank() == 0 ? convoy::run_loader_bench(lbo) : 0;
  if (*ev) return convoy::run_eval(e, mpi.rank(), mpi.size());
  if (*syn) {
    convoy::SyntheticSpec spec;
    spec.file_counts.assign(size_t(std::max(1, syn_files)), uint32_t(std::max(1, syn_per_file)));
    if (syn_last > 0) spec.file_counts.back() = uint32_t(syn_last);
    spec.shape = {uint32_t(syn_size), uint32_t(syn_size), uint32_t(syn_channels)};
    spec.classes = syn_classes;
    spec.encoding = convoy::parse_encoding(syn_encoding);
    spec.seed = syn_seed;
    if (mpi.rank() == 0) convoy::write_synthetic_dataset(syn_out, spec);
    return 0;
  }
  if (t.config.empty() && t.resume.empty()) convoy::fail("--config is required (or --resume)");
  if (t.data.empty() && !t.print_net) convoy::fail("--data is required");
  return convoy::run_training(t, mpi.rank(), mpi.size());
}

}  // namespace

int main(int argc, char** argv) {
  convoy::ensure_fast_blas(argv);
  return convoy::run_main("train", body, argc, argv);
}
