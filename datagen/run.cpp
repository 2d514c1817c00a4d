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
#include "datagen/file_buffer.h"
#include "datagen/file_maker.h"
#include "datagen/gpu_lanes.h"
#include "datagen/gpu_resize.h"
#include "datagen/index.h"
#include "datagen/mpi_bytes.h"
#include "datagen/output_folder.h"
#include "datagen/plan.h"
#include "datagen/progress.h"
#include "datagen/rank_result.h"
#include "datagen/run_identity.h"
#include "datagen/run_report.h"
#include "datagen/sample_source.h"
#include "datagen/stats.h"
#include "datagen/timeline.h"
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

// Rank 0: the output folder claimed (locked for the run, checked to hold nothing of the user's),
// the index's text, reused from an earlier run of the same inputs and options or scanned, and the
// folder prepared for it.
std::string index_on_root(const RunOptions& opt, double& scan_seconds, std::unique_ptr<OutputLock>& lock) {
  lock = claim_output(opt.output);
  Stopwatch w;
  const nlohmann::json stamps = input_stamps(opt);
  std::string text = saved_index(opt, stamps);
  if (!text.empty()) {
    log_info("inputs unchanged since the index in %s was made: reusing it", opt.output.c_str());
  } else {
    text = serialize_index(scan_inputs({opt.inputs, opt.classes_file, opt.labels_file}));
  }
  scan_seconds = w.seconds();
  prepare_output(opt, text, stamps);
  return text;
}

// Rank 0's error, if any, thrown on every rank; else rank 0's index text on every rank.
void share_index(std::string& text, std::string& error, const MpiContext& mpi) {
  if (mpi.size() > 1) {
    bcast_string(error, 0);
    if (error.empty()) bcast_string(text, 0);
  }
  if (!error.empty()) throw Error(error);
}

// Rank 0 alone writes dataset.json, so every rank must write into the very same folder.
void require_shared_output(const RunOptions& opt) {
  int shared = file_exists(join_path(opt.output, kRunFile)) ? 1 : 0, all_shared = 0;
  CONVOY_MPI_CHECK(MPI_Allreduce(&shared, &all_shared, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  if (!all_shared)
    fail_file(opt.output,
              "is not visible to every rank; under mpirun across nodes --output must be on a file "
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

// Ranks left without work for a tenth of the run or more: one line saying how to avoid it.
void log_rank_balance(uint64_t samples, uint32_t per_file, int ranks) {
  const double balance = rank_balance(samples, per_file, ranks);
  if (balance >= 0.9) return;
  const uint64_t files = (samples + per_file - 1) / per_file;
  log_info(
      "%d ranks and %llu batch files of %u samples: batch files are made whole by one rank each, so the ranks "
      "work only %.0f %% of the run; --per-file %u deals them evenly (or run fewer ranks, with more --threads each)",
      ranks, (unsigned long long)files, per_file, 100 * balance, even_per_file(samples, per_file, ranks));
}

// A thread joined when it goes out of scope, also when an error passes by.
struct JoinedThread {
  std::thread thread;
  ~JoinedThread() {
    if (thread.joinable()) thread.join();
  }
};

size_t files_in_memory(const RunOptions& opt, int threads) {
  if (opt.files_in_memory > 0) return std::max<size_t>(2, size_t(opt.files_in_memory));
  return batch_files_in_memory(double(opt.per_file) * double(opt.typical_sample_bytes()), threads);
}

// Raw output of one shape: the memory of the rank's first files, faulted in while it starts up.
std::unique_ptr<PrefaultedBuffers> prefault(const RunOptions& opt, int threads) {
  if (opt.encoding != Encoding::raw || opt.varied()) return nullptr;
  const uint64_t n = opt.per_file;
  const size_t bytes = batch_layout(opt.shape(), Encoding::raw, 0, n, n * opt.shape().bytes()).file_bytes;
  return std::make_unique<PrefaultedBuffers>(files_in_memory(opt, threads), bytes);
}

// This rank's batch files made (or kept) and written, their samples added to `sums`; then it
// waits for every rank's. An error here ends the whole job: the other ranks may be waiting.
RankResult make_rank_files(const RunOptions& opt, const InputIndex& index, const Plan& plan, const RankShare& share,
                           int threads, GpuLanes* lanes, const MpiContext& mpi, DatasetSums& sums, Steps& steps,
                           PrefaultedBuffers* memory, JoinedThread& releaser) {
  RankResult mine;
  try {
    Laps lap;
    Stopwatch w;
    const SampleSource source(index, share.samples);
    mine.phases.read += w.seconds();  // streamed inputs are read here
    BatchWriter writer(opt.output, files_in_memory(opt, threads),
                       opt.writers > 0 ? opt.writers : batch_writers(threads));
    if (memory) writer.add_spare(memory->take());
    if (lanes && opt.gpu_always) lanes->wait_ready();
    const int listed = lanes ? std::max(1, gpu_resize_listed_gpus()) : 1;
    FileMaker maker(opt, index, plan, source, threads, lanes, mpi.rank(), (mpi.local_size() + listed - 1) / listed);
    Progress progress(mpi, index.entries.size(), share.files_per_rank);
    steps.setup = lap(Span::setup);
    // MPI stays on this thread (MPI_THREAD_FUNNELED): the maker reports each written file here.
    const FileMaker::Report report = [&](uint64_t b, const BatchFileEntry& e) {
      mine.files.emplace_back(b, e);
      progress.file_done(plan.file_end(b) - plan.file_begin(b));
    };
    maker.run(share.files, writer, report);
    lap.restart();  // the region's own spans are the threads'
    steps.files = maker.region_seconds();
    maker.drain(writer, report);
    // Freeing a few hundred MB of pages takes tens of ms (45 ms for 800 MB on the VM): done beside
    // the rest of the run's end instead of before it.
    releaser.thread = std::thread([spare = writer.take_spare()]() mutable { spare.clear(); });
    maker.add_sums_to(sums);
    mine.kept = maker.kept();
    mine.rejects = maker.rejects();
    mine.phases += maker.phases(writer);
    progress.finish();
    if (mpi.size() > 1) CONVOY_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    mine.phases.wait += steps.drain = lap(Span::drain);
  } catch (const std::exception& e) {
    // Alone, unwinding joins every thread and run_main prints the same line; with other ranks,
    // which may be waiting for this one, the whole job must end.
    if (mpi.size() == 1) throw;
    std::fprintf(stderr, "datagen: error: %s\n", e.what());
    mpi.abort(1);
  }
  return mine;
}

// --timeline: every rank's spans, counted from the earliest of them, into one file by rank 0.
void write_timeline(const RunOptions& opt, const MpiContext& mpi) {
  if (opt.timeline.empty()) return;
  int64_t first = Timeline::first_us(), origin = first;
  if (mpi.size() > 1) CONVOY_MPI_CHECK(MPI_Allreduce(&first, &origin, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD));
  const std::vector<std::string> all = gather_strings(Timeline::events(mpi.rank(), origin), mpi);
  if (mpi.rank() == 0) write_file_atomic(opt.timeline, Timeline::document(all));
}

}  // namespace

int run_datagen(const RunOptions& opt, const MpiContext& mpi, const Steps& before) {
  Steps steps = before;
  Laps lap;
  validate_run_options(opt);
  const int threads = threads_per_rank(opt, mpi);
  const std::unique_ptr<GpuLanes> lanes = make_lanes(opt, threads, mpi);
  const std::unique_ptr<PrefaultedBuffers> memory = opt.index_only ? nullptr : prefault(opt, threads);
  double scan_seconds = 0;
  std::string text, error;
  std::unique_ptr<OutputLock> lock;  // rank 0's, held to the end of the run
  if (mpi.rank() == 0) {
    try {
      text = index_on_root(opt, scan_seconds, lock);
    } catch (const std::exception& e) {  // any failure here must reach the other ranks
      error = e.what();
    }
  }
  steps.index = lap(Span::index);
  share_index(text, error, mpi);
  if (mpi.size() > 1) require_shared_output(opt);
  const InputIndex index = parse_index(text, join_path(opt.output, kIndexFile));
  std::string().swap(text);  // the index holds its own copy of every path: the text is not needed again
  steps.broadcast = lap(Span::broadcast);
  log_index(index, scan_seconds);

  int status = 0;
  for (const auto& in : index.inputs) status = in.complete ? status : 2;
  Stopwatch plan_clock;
  const Plan plan = make_plan(index.entries.size(), opt.per_file, opt.seed);
  const RankShare share = rank_share(plan, mpi.rank(), mpi.size());
  if (opt.index_only) {
    log_info("plan of %llu batch files in %.2f s; --index-only: stopping before decoding",
             (unsigned long long)plan.num_files(), plan_clock.seconds());
    write_timeline(opt, mpi);
    return status;
  }
  log_rank_balance(index.entries.size(), opt.per_file, mpi.size());
  cv::setNumThreads(1);  // the OpenMP threads are the parallelism; OpenCV must not add its own
  DatasetSums sums(index.classes.size(), opt.shape());
  steps.plan = lap(Span::plan);
  JoinedThread releaser;
  const RankResult mine = make_rank_files(opt, index, plan, share, threads, lanes.get(), mpi, sums, steps, memory.get(),
                                          releaser);
  lap.restart();
  sums.reduce_to_root(mpi);
  const RankResult all = gather_results(mine, mpi);
  steps.reduce = lap(Span::reduce);
  if (mpi.rank() == 0) {
    const RunEnd end{sums, all, mpi.size(), threads, scan_seconds, steps, lanes.get(), status};
    const DatasetMeta meta = finish_dataset(opt, index, end);
    steps.finish = lap(Span::finish);
    if (meta.num_samples == 0) {
      // Rank 0 alone knows; the other ranks finish as usual and mpirun reports this rank's status.
      std::fprintf(stderr, "datagen: error: %s\n", nothing_decoded(index, all).c_str());
      status = 1;
    } else {
      log_run_end(opt, index, meta, end);
    }
  }
  write_timeline(opt, mpi);
  return status;
}

}  // namespace convoy::datagen
