// The run. Every rank computes the same plan from the broadcast index; batch file b is made by
// rank b mod N alone, its samples decoded in parallel into their slots and compacted in slot
// order, so its bytes depend only on the inputs, the options and the seed.
#include "datagen/run.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <opencv2/core.hpp>
#include <string>
#include <thread>

#include "datagen/batch_writer.h"
#include "datagen/file_maker.h"
#include "datagen/gpu_lanes.h"
#include "datagen/gpu_resize.h"
#include "datagen/index.h"
#include "datagen/mpi_bytes.h"
#include "datagen/plan.h"
#include "datagen/progress.h"
#include "datagen/rank_result.h"
#include "datagen/run_identity.h"
#include "datagen/run_report.h"
#include "datagen/sample_source.h"
#include "datagen/stats.h"
#include "shared/atomic_file.h"
#include "shared/error.h"
#include "shared/log.h"
#include "shared/timer.h"

namespace convoy::datagen {
namespace {

int threads_per_rank(const RunOptions& opt, const MpiContext& mpi) {
  if (opt.threads > 0) return opt.threads;
  return std::max(1, int(std::thread::hardware_concurrency()) / std::max(1, mpi.local_size()));
}

// With --gpu-resize: the lanes, whose device is chosen when they start, so that a rank that never
// uses them never starts CUDA.
std::unique_ptr<GpuLanes> make_lanes(const RunOptions& opt, int threads, const MpiContext& mpi) {
  if (!opt.gpu_resize) return nullptr;
  GpuResizeOptions o;
  o.device = -1;
  o.size = opt.size;
  o.policy = opt.resize;
  o.channels = opt.channels;
  return std::make_unique<GpuLanes>(o, threads, opt.gpu_always, mpi.local_rank());
}

// Rank 0: the index's text, reused from an earlier run of the same inputs and options or scanned,
// and the output folder prepared for it.
std::string index_on_root(const RunOptions& opt, double& scan_seconds) {
  make_dirs(opt.output);
  Stopwatch w;
  const nlohmann::json stamps = input_stamps(opt);
  std::string text = saved_index(opt, stamps);
  if (!text.empty()) {
    log_info("inputs unchanged since the index in %s was made: reusing it", opt.output.c_str());
  } else {
    InputIndex idx = scan_inputs({opt.inputs, opt.classes_file, opt.labels_file});
    if (idx.entries.empty()) fail("no images found in the inputs (see the refused members above, if any)");
    text = serialize_index(idx);
  }
  scan_seconds = w.seconds();
  prepare_output(opt, text, stamps);
  return text;
}

// The index's text on every rank, or rank 0's error thrown on every rank.
std::string index_on_every_rank(const RunOptions& opt, const MpiContext& mpi, double& scan_seconds) {
  std::string text, error;
  if (mpi.rank() == 0) {
    try {
      text = index_on_root(opt, scan_seconds);
    } catch (const std::exception& e) {  // any failure here must reach the other ranks
      error = e.what();
    }
  }
  if (mpi.size() > 1) {
    bcast_string(error, 0);
    if (error.empty()) bcast_string(text, 0);
  }
  if (!error.empty()) throw Error(error);
  return text;
}

// Rank 0 alone writes dataset.json, so every rank must write into the very same folder.
void require_shared_output(const RunOptions& opt) {
  int shared = file_exists(join_path(opt.output, kRunFile)) ? 1 : 0, all_shared = 0;
  CONVOY_MPI_CHECK(MPI_Allreduce(&shared, &all_shared, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  if (!all_shared)
    fail_file(opt.output, "is not visible to every rank; under mpirun across nodes --output must be on a file "
                          "system all nodes share");
}

void log_index(const InputIndex& index, double scan_seconds) {
  for (const auto& in : index.inputs)
    log_info("%s: %s input", in.path.c_str(),
             in.kind == InputKind::stream   ? "compressed (streamed, no random access)"
             : in.kind == InputKind::folder ? "folder"
                                            : "tar (random access)");
  log_info("index of %zu images in %.2f s (%zu classes, %llu non-image members skipped, %zu refused)",
           index.entries.size(), scan_seconds, index.classes.size(), (unsigned long long)index.skipped,
           index.rejects.size());
}

// This rank's batch files made (or kept) and written, their samples added to `sums`; then it
// waits for every rank's. An error here ends the whole job: the other ranks may be waiting.
RankResult make_rank_files(const RunOptions& opt, const InputIndex& index, const Plan& plan, const RankShare& share,
                           int threads, GpuLanes* lanes, const MpiContext& mpi, DatasetSums& sums) {
  RankResult mine;
  try {
    Stopwatch w;
    const SampleSource source(index, share.samples);
    mine.phases.read += w.seconds();
    const size_t in_memory = batch_files_in_memory(double(opt.per_file) * double(opt.shape().bytes()), threads);
    BatchWriter writer(opt.output, in_memory, int(std::max<size_t>(1, in_memory - 2)));
    if (lanes && opt.gpu_always) lanes->wait_ready();
    const int listed = lanes ? std::max(1, gpu_resize_listed_gpus()) : 1;
    FileMaker maker(opt, index, plan, source, threads, lanes, mpi.rank(), (mpi.local_size() + listed - 1) / listed);
    Progress progress(mpi, index.entries.size(), share.files_per_rank);
    // MPI stays on this thread (MPI_THREAD_FUNNELED): the maker reports each written file here.
    maker.run(share.files, writer, [&](uint64_t b, const BatchFileEntry& e) {
      mine.files.emplace_back(b, e);
      progress.file_done(plan.file_end(b) - plan.file_begin(b));
    });
    maker.add_sums_to(sums);
    mine.kept = maker.kept();
    mine.rejects = maker.rejects();
    mine.phases += maker.phases(writer);
    Stopwatch wait;
    progress.finish();
    CONVOY_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    mine.phases.wait += wait.seconds();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "datagen: error: %s\n", e.what());
    mpi.abort(1);
  }
  return mine;
}

}  // namespace

int run_datagen(const RunOptions& opt, const MpiContext& mpi) {
  Stopwatch total;
  validate_run_options(opt);
  const int threads = threads_per_rank(opt, mpi);
  const std::unique_ptr<GpuLanes> lanes = make_lanes(opt, threads, mpi);
  double scan_seconds = 0;
  std::string text = index_on_every_rank(opt, mpi, scan_seconds);
  if (mpi.size() > 1) require_shared_output(opt);
  const InputIndex index = parse_index(text, join_path(opt.output, kIndexFile));
  std::string().swap(text);  // the index holds its own copy of every path: the text is not needed again
  log_index(index, scan_seconds);

  int status = 0;
  for (const auto& in : index.inputs) status = in.complete ? status : 2;
  Stopwatch plan_clock;
  const Plan plan = make_plan(index.entries.size(), opt.per_file, opt.seed);
  const RankShare share = rank_share(plan, mpi.rank(), mpi.size());
  if (opt.index_only) {
    log_info("plan of %llu batch files in %.2f s; --index-only: stopping before decoding",
             (unsigned long long)plan.num_files(), plan_clock.seconds());
    return status;
  }
  cv::setNumThreads(1);  // the OpenMP threads are the parallelism; OpenCV must not add its own
  DatasetSums sums(index.classes.size(), opt.shape());
  const RankResult mine = make_rank_files(opt, index, plan, share, threads, lanes.get(), mpi, sums);
  sums.reduce_to_root(mpi);
  const RankResult all = gather_results(mine, mpi);
  if (mpi.rank() != 0) return status;
  finish_dataset(opt, index, {sums, all, mpi.size(), threads, scan_seconds, total, lanes.get(), status});
  return status;
}

}  // namespace convoy::datagen
