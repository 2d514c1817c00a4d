// datagen entry point: the command line. Without a subcommand it makes a dataset folder from tar
// archives or folders (under mpirun or alone); subcommands convert, check and show datasets.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>

#include "datagen/cli_checks.h"
#include "datagen/dataset_tools.h"
#include "datagen/decode_bench.h"
#include "datagen/decode_ceiling.h"
#include "datagen/idx_to_tar.h"
#include "datagen/run.h"
#include "datagen/timeline.h"
#include "shared/error.h"
#include "shared/log.h"
#include "shared/mpi_context.h"

using namespace convoy;
using namespace convoy::datagen;

namespace {

// No subcommand: make a dataset folder from tar archives or folders, under mpirun or alone.
struct MakeDataset {
  RunOptions run;
  std::string resize = "crop", encoding = "raw", gpu_route = "auto";
  CLI::Option* quality = nullptr;
  CLI::Option* min_saving = nullptr;
  CLI::Option* max_side = nullptr;
  CLI::Option* size = nullptr;

  explicit MakeDataset(CLI::App& app) {
    app.add_option("--input", run.inputs, "tar, .tar.gz/.bz2/.zst, tar of tars, or folder (repeatable)");
    app.add_option("--output", run.output, "dataset folder to write");
    size = app.add_option("--size", run.size, "output images are size x size")->check(CLI::Range(1, 16384));
    app.add_option("--channels", run.channels, "1 (gray) or 3 (RGB)")->check(CLI::IsMember({1, 3}))->default_val(3);
    app.add_option("--classes", run.classes_file, "class names, one per line: fixes the class list and order");
    app.add_option("--labels", run.labels_file, "label file: 'name label' per line");
    app.add_option("--per-file", run.per_file, "samples per batch file")
        ->check(whole_number(1, 1u << 30))
        ->default_val(1024);
    app.add_option("--seed", run.seed, "shuffle seed")->check(whole_number(0, UINT64_MAX))->default_val(1);
    app.add_option("--threads", run.threads, "OpenMP threads per rank (0: cores / ranks on this node)")
        ->check(CLI::Range(0, 4096))
        ->default_val(0);
    app.add_option("--writers", run.writers, "batch-file writer threads per rank (0: from --threads)")
        ->check(CLI::Range(0, 4096))
        ->default_val(0);
    app.add_option("--files-in-memory", run.files_in_memory,
                   "batch files a rank holds in memory at once, made, waiting or being written (0: from --threads "
                   "and the file size; at least 2)")
        ->check(CLI::Range(0, 4096))
        ->default_val(0);
    app.add_option("--resize", resize,
                   "crop (short side to size, centre crop), squash, or short:S (short side to S, aspect kept: "
                   "batch-file format v2, each image at its own size)")
        ->check(resize_choice())
        ->default_val("crop");
    max_side = app.add_option("--max-side", run.max_side, "with --resize short:S: cap the long side at M, aspect kept")
                   ->check(CLI::Range(1, 65536));
    app.add_option("--encoding", encoding, "raw or jpeg")->check(CLI::IsMember({"raw", "jpeg"}))->default_val("raw");
    quality = app.add_option("--quality", run.quality, "JPEG quality for --encoding jpeg")
                  ->check(CLI::Range(1, 100))
                  ->default_val(90);
    CLI::Option* gpu = app.add_flag(
        "--gpu-resize", run.gpu_resize,
        "resize on the GPU (local rank modulo the node's GPUs); same bytes as the CPU path");
    app.add_option("--gpu-route", gpu_route,
                   "with --gpu-resize: auto (each image where it costs less; the CPU until the GPU is ready) or "
                   "always (wait for the GPU and send it every image)")
        ->check(CLI::IsMember({"auto", "always"}))
        ->needs(gpu)
        ->default_val("auto");
    min_saving = app.add_option("--gpu-min-saving", run.gpu_min_saving,
                                "with --gpu-route auto: start the GPU only once the CPU resize time left per thread "
                                "is at least this many seconds")
                     ->check(finite_number(0, true))
                     ->needs(gpu)
                     ->default_val(run.gpu_min_saving);
    app.add_flag("--index-only", run.index_only,
                 "scan the inputs, save index.tsv and make the plan, then stop (a later run reuses the index)");
    app.add_option("--max-pixels", run.limits.max_pixels, "refuse images with more pixels (decompression bombs)")
        ->check(whole_number(1, uint64_t{1} << 40))
        ->default_val(run.limits.max_pixels);
    app.add_option("--max-aspect", run.limits.max_aspect, "refuse images whose sides differ by more than this factor")
        ->check(finite_number(1, true))
        ->default_val(run.limits.max_aspect);
    app.add_option("--timeline", run.timeline,
                   "write what every thread of every rank did when, as Chrome trace-event JSON (chrome://tracing, "
                   "ui.perfetto.dev)")
        ->check(writable_place());
  }

  // Values that the rest of the command line would ignore; thrown while CLI11 parses, so that the
  // refusal is its one line.
  void check_combinations() const {
    if (quality->count() > 0 && encoding != "jpeg")
      throw CLI::ValidationError("--quality", "applies to --encoding jpeg only (raw samples are not encoded)");
    if (min_saving->count() > 0 && gpu_route == "always")
      throw CLI::ValidationError("--gpu-min-saving", "applies to --gpu-route auto only");
    const bool short_side = resize.rfind("short", 0) == 0;
    if (max_side->count() > 0 && !short_side)
      throw CLI::ValidationError("--max-side", "applies to --resize short:S only");
    if (short_side && size->count() > 0 && resize != "short" && std::to_string(run.size) != resize.substr(6))
      throw CLI::ValidationError("--size", "differs from the short side of --resize " + resize + " (give one)");
    if (resize == "short" && size->count() == 0)
      throw CLI::ValidationError("--resize", "short needs its side: --resize short:S");
  }

  int operator()(int argc, char** argv) {
    run.resize = parse_resize_policy(resize.substr(0, resize.find(':')));
    if (resize.rfind("short:", 0) == 0) run.size = std::stoi(resize.substr(6));
    run.encoding = parse_encoding(encoding);
    run.gpu_always = gpu_route == "always";
    if (!run.timeline.empty()) Timeline::enable();
    Steps before;
    before.exec = process_seconds();
    Timeline::add_exec(before.exec);
    Laps lap;
    // datagen's messages are few and small (the index once, a word per batch file, the sums at the
    // end), and Open MPI's default pick of a transport layer starts UCX in every process: 0.24 s of
    // MPI_Init on the 2-core VM, against 0.05 s with ob1 (shared memory and TCP). A value the user
    // set stays. Without a launcher datagen is one process and needs no MPI (MpiContext::Start).
    setenv("OMPI_MCA_pml", "ob1", 0);
    MpiContext mpi(&argc, &argv, MpiContext::Start::when_launched);
    before.mpi_init = lap(Span::mpi_init);
    log_setup("datagen", mpi.rank(), mpi.size());
    Timeline::name_thread("main, decoding thread 0", 0);
    try {
      return run_datagen(run, mpi, before);
    } catch (const Error& e) {
      // Errors before the work are the same on every rank; one line is enough.
      if (mpi.rank() == 0) std::fprintf(stderr, "datagen: error: %s\n", e.what());
      return 1;
    }
  }
};

// Each subcommand below binds its options to its own members, so it stays where it was made.

struct Idx2Tar {
  IdxToTarOptions idx;
  CLI::App* cmd;

  explicit Idx2Tar(CLI::App& app)
      : cmd(app.add_subcommand("idx2tar", "Fashion-MNIST IDX files -> tar of PNGs in per-class folders (or flat)")) {
    cmd->add_option("--images", idx.images, "images IDX file (.gz or plain)")->required();
    cmd->add_option("--labels", idx.labels, "labels IDX file (.gz or plain)")->required();
    cmd->add_option("--out", idx.out, "tar file to write (- for standard output)")->required();
    cmd->add_option("--classes-out", idx.classes_out, "also write the class names, one per line");
    cmd->add_option("--flat-labels", idx.flat_labels,
                    "the PNGs at the tar's root, and this label file ('name class' per line) for --labels");
    cmd->add_option("--first", idx.first, "only the first N images (default: all)")->check(CLI::PositiveNumber);
  }
  int operator()() const {
    const size_t n = idx_to_tar(idx);
    std::fprintf(stderr, "datagen: wrote %zu images to %s\n", n, idx.out.c_str());
    return 0;
  }
};

struct Verify {
  std::string dir;
  CLI::App* cmd;

  explicit Verify(CLI::App& app)
      : cmd(app.add_subcommand("verify", "check every checksum, the counts and the label range of a dataset")) {
    cmd->add_option("dir", dir, "dataset folder")->required();
  }
  int operator()() const {
    const auto problems = verify_dataset(dir);
    for (const auto& p : problems) std::fprintf(stderr, "datagen: verify: %s\n", p.c_str());
    if (!problems.empty()) return 1;
    std::fprintf(stderr, "datagen: verify: %s is sound\n", dir.c_str());
    return 0;
  }
};

struct Inspect {
  std::string dir;
  CLI::App* cmd;

  explicit Inspect(CLI::App& app) : cmd(app.add_subcommand("inspect", "print a summary of a dataset")) {
    cmd->add_option("dir", dir, "dataset folder")->required();
  }
  int operator()() const {
    std::fputs(inspect_dataset(dir).c_str(), stdout);
    return 0;
  }
};

struct Preview {
  std::string dir, out;
  size_t count = 64;
  CLI::App* cmd;

  explicit Preview(CLI::App& app)
      : cmd(app.add_subcommand("preview", "write a PNG contact sheet of samples with their class names")) {
    cmd->add_option("dir", dir, "dataset folder")->required();
    cmd->add_option("--out", out, "PNG file to write (- for standard output)")->required();
    cmd->add_option("--count", count, "how many samples")->check(whole_number(1, 1 << 20))->default_val(64);
  }
  int operator()() const {
    const size_t n = preview_dataset(dir, out, count);
    std::fprintf(stderr, "datagen: wrote %zu samples to %s\n", n, out.c_str());
    return 0;
  }
};

struct Classes {
  std::string dir, out;
  CLI::App* cmd;

  explicit Classes(CLI::App& app)
      : cmd(app.add_subcommand("classes", "write a dataset's class names, one per line (for --classes)")) {
    cmd->add_option("dir", dir, "dataset folder")->required();
    cmd->add_option("--out", out, "class file to write (- for standard output)")->required();
  }
  int operator()() const {
    write_dataset_classes(dir, out);
    return 0;
  }
};

struct BenchDecode {
  BenchOptions bench;
  std::string resize = "crop";
  int concurrent = 0;
  double seconds = 3.0;
  std::string work = "decode", write_dir;
  CLI::Option* write_dir_opt = nullptr;
  CLI::App* cmd;

  explicit BenchDecode(CLI::App& app)
      : cmd(app.add_subcommand("bench-decode", "single-core throughput against TurboJPEG decode alone")) {
    cmd->add_option("--input", bench.input, "tar or folder of JPEGs")->required();
    cmd->add_option("--size", bench.size, "output size")->check(CLI::Range(1, 16384))->default_val(256);
    cmd->add_option("--channels", bench.channels, "1 or 3")->check(CLI::IsMember({1, 3}))->default_val(3);
    cmd->add_option("--resize", resize, "crop or squash")
        ->check(CLI::IsMember({"crop", "squash"}))
        ->default_val("crop");
    cmd->add_option("--limit", bench.limit, "images to use")->check(whole_number(1, 1 << 24))->default_val(1000);
    cmd->add_option("--repeat", bench.repeat, "passes (best is reported)")->check(CLI::Range(1, 1000))->default_val(3);
    CLI::Option* conc =
        cmd->add_option("--concurrent", concurrent,
                        "instead: N plain TurboJPEG decoders at once (decode only, at datagen's DCT scale for --size), "
                        "one per core, each over its share of the --limit JPEGs; the sum is the ceiling for N cores")
            ->check(CLI::Range(0, 4096));
    cmd->add_option("--seconds", seconds, "with --concurrent: how long they decode")
        ->check(finite_number(0, false))
        ->needs(conc)
        ->default_val(3.0);
    cmd->add_option("--work", work,
                    "with --concurrent: decode (plain TurboJPEG), make (datagen's decode of the centre square, "
                    "resize and checksum per sample) or make-write (and each sample written to a file per thread "
                    "in --write-dir)")
        ->check(CLI::IsMember({"decode", "make", "make-write"}))
        ->needs(conc)
        ->default_val("decode");
    write_dir_opt = cmd->add_option("--write-dir", write_dir,
                                    "with --work make-write: the folder for the threads' files")
                        ->check(CLI::ExistingDirectory);
    cmd->parse_complete_callback([this] {
      if (write_dir_opt->count() > 0 && work != "make-write")
        throw CLI::ValidationError("--write-dir", "applies to --work make-write only");
    });
  }
  int operator()() {
    if (concurrent > 0) {
      const CeilingWork w = work == "make"         ? CeilingWork::make
                            : work == "make-write" ? CeilingWork::make_write
                                                   : CeilingWork::decode;
      return decode_ceiling({bench.input, bench.size, bench.channels, bench.limit, concurrent, seconds, w, write_dir});
    }
    bench.resize = parse_resize_policy(resize);
    if (bench.resize == ResizePolicy::short_side) fail("bench-decode: --resize must be crop or squash");
    return bench_decode(bench);
  }
};

int body(int argc, char** argv) {
  CLI::App app{"datagen: tar archives of images -> shuffled, checksummed batch files (docs/DATAGEN.md)"};
  app.require_subcommand(0, 1);
  MakeDataset make(app);
  Idx2Tar idx2tar(app);
  Verify verify(app);
  Inspect inspect(app);
  Preview preview(app);
  Classes classes(app);
  BenchDecode bench(app);

  // Every refusal of the command line is one line, as datagen's other errors are.
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return "datagen: error: " + std::string(e.what()) + " (datagen --help lists the flags)\n";
  });
  app.parse_complete_callback([&make, &app] {
    if (app.get_subcommands().empty()) make.check_combinations();
  });
  if (argc == 1) {
    std::fputs(app.help().c_str(), stderr);
    return 1;
  }
  CLI11_PARSE(app, argc, argv);
  if (verify.cmd->parsed()) return verify();
  if (inspect.cmd->parsed()) return inspect();
  if (preview.cmd->parsed()) return preview();
  if (classes.cmd->parsed()) return classes();
  if (bench.cmd->parsed()) return bench();
  if (idx2tar.cmd->parsed()) return idx2tar();
  return make(argc, argv);
}

}  // namespace

int main(int argc, char** argv) { return convoy::run_main("datagen", body, argc, argv); }
