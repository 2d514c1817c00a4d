// datagen entry point: the command line. Without a subcommand it makes a dataset folder from tar
// archives or folders (under mpirun or alone); subcommands convert, check and show datasets.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "datagen/bench.h"
#include "datagen/dataset_tools.h"
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
  app.add_flag("--gpu-resize", run.gpu_resize,
               "resize on the GPU (local rank modulo the node's GPUs); same bytes as the CPU path");
  std::string gpu_route = "auto";
  app.add_option("--gpu-route", gpu_route,
                 "with --gpu-resize: auto (each image where it costs less; the CPU until the GPU is ready) or "
                 "always (wait for the GPU and send it every image)")
      ->check(CLI::IsMember({"auto", "always"}))
      ->default_val("auto");
  app.add_option("--gpu-min-saving", run.gpu_min_saving,
                 "with --gpu-route auto: start the GPU only once the CPU resize time left per thread is at "
                 "least this many seconds")
      ->default_val(run.gpu_min_saving);
  app.add_flag("--index-only", run.index_only,
               "scan the inputs, save index.tsv and make the plan, then stop (a later run reuses the index)");
  app.add_option("--max-pixels", run.limits.max_pixels, "refuse images with more pixels (decompression bombs)")
      ->default_val(run.limits.max_pixels);
  app.add_option("--max-aspect", run.limits.max_aspect, "refuse images whose sides differ by more than this factor")
      ->default_val(run.limits.max_aspect);

  IdxToTarOptions idx;
  CLI::App* idx2tar = app.add_subcommand("idx2tar", "Fashion-MNIST IDX files -> tar of PNGs in per-class folders");
  idx2tar->add_option("--images", idx.images, "images IDX file (.gz or plain)")->required();
  idx2tar->add_option("--labels", idx.labels, "labels IDX file (.gz or plain)")->required();
  idx2tar->add_option("--out", idx.out, "tar file to write (- for standard output)")->required();
  idx2tar->add_option("--classes-out", idx.classes_out, "also write the class names, one per line");

  std::string dir, out;
  size_t count = 64;
  CLI::App* verify = app.add_subcommand("verify", "check every checksum, the counts and the label range of a dataset");
  verify->add_option("dir", dir, "dataset folder")->required();
  CLI::App* inspect = app.add_subcommand("inspect", "print a summary of a dataset");
  inspect->add_option("dir", dir, "dataset folder")->required();
  CLI::App* preview = app.add_subcommand("preview", "write a PNG contact sheet of samples with their class names");
  preview->add_option("dir", dir, "dataset folder")->required();
  preview->add_option("--out", out, "PNG file to write (- for standard output)")->required();
  preview->add_option("--count", count, "how many samples")->default_val(64);
  CLI::App* classes = app.add_subcommand("classes", "write a dataset's class names, one per line (for --classes)");
  classes->add_option("dir", dir, "dataset folder")->required();
  classes->add_option("--out", out, "class file to write (- for standard output)")->required();

  BenchOptions bench;
  std::string bench_resize = "crop";
  CLI::App* bench_cmd = app.add_subcommand("bench-decode", "single-core throughput against TurboJPEG decode alone");
  bench_cmd->add_option("--input", bench.input, "tar or folder of JPEGs")->required();
  bench_cmd->add_option("--size", bench.size, "output size")->default_val(256);
  bench_cmd->add_option("--channels", bench.channels, "1 or 3")->default_val(3);
  bench_cmd->add_option("--resize", bench_resize, "crop or squash")->default_val("crop");
  bench_cmd->add_option("--limit", bench.limit, "images to use")->default_val(1000);
  bench_cmd->add_option("--repeat", bench.repeat, "passes (best is reported)")->default_val(3);

  if (argc == 1) {
    std::fputs(app.help().c_str(), stderr);
    return 1;
  }
  CLI11_PARSE(app, argc, argv);

  if (verify->parsed()) {
    const auto problems = verify_dataset(dir);
    for (const auto& p : problems) std::fprintf(stderr, "datagen: verify: %s\n", p.c_str());
    if (!problems.empty()) return 1;
    std::fprintf(stderr, "datagen: verify: %s is sound\n", dir.c_str());
    return 0;
  }
  if (inspect->parsed()) {
    std::fputs(inspect_dataset(dir).c_str(), stdout);
    return 0;
  }
  if (preview->parsed()) {
    const size_t n = preview_dataset(dir, out, count);
    std::fprintf(stderr, "datagen: wrote %zu samples to %s\n", n, out.c_str());
    return 0;
  }
  if (classes->parsed()) {
    write_dataset_classes(dir, out);
    return 0;
  }
  if (bench_cmd->parsed()) {
    bench.resize = parse_resize_policy(bench_resize);
    if (bench.resize == ResizePolicy::short_side) fail("bench-decode: --resize must be crop or squash");
    return bench_decode(bench);
  }

  if (idx2tar->parsed()) {
    const size_t n = idx_to_tar(idx);
    std::fprintf(stderr, "datagen: wrote %zu images to %s\n", n, idx.out.c_str());
    return 0;
  }

  run.resize = parse_resize_policy(resize);
  run.encoding = parse_encoding(encoding);
  run.gpu_always = gpu_route == "always";
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
