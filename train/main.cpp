// train: trains a CNN described by a TOML config on a datagen dataset folder (CPU backend, data
// parallel over MPI ranks), or evaluates a checkpoint with `train eval`.
#include <CLI/CLI.hpp>

#include "shared/error.h"
#include "shared/log.h"
#include "shared/mpi_context.h"
#include "train/blas_setup.h"
#include "train/trainer.h"

namespace {

int body(int argc, char** argv) {
  convoy::MpiContext mpi(&argc, &argv);
  convoy::log_setup("train", mpi.rank(), mpi.size());
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
  app.add_option("--readers", t.readers, "loader threads");
  app.add_option("--prefetch", t.prefetch, "batches the loader keeps ready");
  app.add_option("--shuffle-files", t.window_files, "shuffle buffer size in batch files");
  app.add_option("--log-every", t.log_every, "a progress line every N steps (0: none)");
  app.add_option("--metrics", t.metrics, "JSONL file of every metric");
  app.add_option("--checkpoint", t.checkpoint, "checkpoint path, written at the end, on SIGINT/SIGTERM and every --checkpoint-every steps");
  app.add_option("--checkpoint-every", t.checkpoint_every, "steps between checkpoints (0: only at the end and on signals)");
  app.add_option("--resume", t.resume, "continue exactly from this checkpoint");
  app.add_option("--stop-after", t.stop_after, "stop after this many steps in all (writes the checkpoint)");
  app.add_option("--device", t.device, "cpu | cuda | auto (this build trains on the CPU)")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  app.add_flag("--print-net", t.print_net, "print layers, output shapes, parameters and FLOPs per image, then exit");

  CLI::App* ev = app.add_subcommand("eval", "evaluate a checkpoint on a dataset");
  ev->add_option("--checkpoint", e.checkpoint, "checkpoint to evaluate")->required();
  ev->add_option("--data", e.data, "dataset folder")->required();
  ev->add_option("--batch", e.batch, "batch size");
  ev->add_option("--threads", e.threads, "compute threads");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& err) {
    return app.exit(err);
  }
  if (*ev) return convoy::run_eval(e, mpi.rank(), mpi.size());
  if (t.config.empty() && t.resume.empty()) convoy::fail("--config is required (or --resume)");
  if (t.data.empty() && !t.print_net) convoy::fail("--data is required");
  if (t.device == "cuda") convoy::fail("--device cuda: this build has only the CPU backend");
  return convoy::run_training(t, mpi.rank(), mpi.size());
}

}  // namespace

int main(int argc, char** argv) {
  convoy::ensure_fast_blas(argv);
  return convoy::run_main("train", body, argc, argv);
}
