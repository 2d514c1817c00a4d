// datagen entry point: the command line. Without a subcommand it makes a dataset folder from tar
// archives or folders (under mpirun or alone); subcommands convert, check and show datasets.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "datagen/idx_to_tar.h"
#include "datagen/run.h"
#include "shared/error.h"
#include "shared/log.h"
#include "shared/mpi_context.h"

using namespace convoy;
using namespace convoy::datagen;

namespace {

int body(int argc, char** argv) {
  CLI::App app{"datagen: tar archives of images -> shuffled, checksummed batch files (docs/DATAGEN.md)"};
  app.require_subcommand(0, 1);

  RunOptions run;
  std::string resize = "crop", encoding = "raw";
  app.add_option("--input", run.inputs, "tar, .tar.gz/.bz2/.zst, tar of tars, or folder (repeatable)");
  app.add_option("--output", run.output, "dataset folder to write");
  app.add_option("--size", run.size, "output images are size x size");
  app.add_option("--channels", run.channels, "1 (gray) or 3 (RGB)")->default_val(3);
  app.add_option("--classes", run.classes_file, "class names, one per line: fixes the class list and order");
  app.add_option("--labels", run.labels_file, "label file: 'name label' per line");
  app.add_option("--per-file", run.per_file, "samples per batch file")->default_val(1024);
  app.add_option("--seed", run.seed, "shuffle seed")->default_val(1);
  app.add_option("--threads", run.threads, "OpenMP threads per rank (0: cores / ranks on this node)")->default_val(0);
  app.add_option("--resize", resize, "crop (short side to size, centre crop), squash, or short")->default_val("crop");
  app.add_option("--encoding", encoding, "raw or jpeg")->default_val("raw");
  app.add_option("--quality", run.quality, "JPEG quality for --encoding jpeg")->default_val(90);
  app.add_option("--max-pixels", run.limits.max_pixels, "refuse images with more pixels (decompression bombs)")
      ->default_val(run.limits.max_pixels);
  app.add_option("--max-aspect", run.limits.max_aspect, "refuse images whose sides differ by more than this factor")
      ->default_val(run.limits.max_aspect);

  IdxToTarOptions idx;
  CLI::App* idx2tar = app.add_subcommand("idx2tar", "Fashion-MNIST IDX files -> tar of PNGs in per-class folders");
  idx2tar->add_option("--images", idx.images, "images IDX file (.gz or plain)")->required();
  idx2tar->add_option("--labels", idx.labels, "labels IDX file (.gz or plain)")->required();
  idx2tar->add_option("--out", idx.out, "tar file to write")->required();
  idx2tar->add_option("--classes-out", idx.classes_out, "also write the class names, one per line");

  CLI11_PARSE(app, argc, argv);

  if (idx2tar->parsed()) {
    const size_t n = idx_to_tar(idx);
    std::fprintf(stderr, "datagen: wrote %zu images to %s\n", n, idx.out.c_str());
    return 0;
  }

  run.resize = parse_resize_policy(resize);
  run.encoding = parse_encoding(encoding);
  MpiContext mpi(&argc, &argv);
  log_setup("datagen", mpi.rank(), mpi.size());
  try {
    return run_datagen(run, mpi);
  } catch (const Error& e) {
    // Errors before the work are the same on every rank; one line is enough.
    if (mpi.rank() == 0) std::fprintf(stderr, "datagen: error: %s\n", e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) { return convoy::run_main("datagen", body, argc, argv); }
