// A rank's batch files, made by its OpenMP threads: they share one queue of samples across the
// files (work_queue.h), and the thread that finishes a file's last sample assembles the file and
// hands it to the writer threads (batch_writer.h). Files kept from an earlier run skip the queue.
#pragma once
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "datagen/batch_writer.h"
#include "datagen/file_job.h"
#include "datagen/gpu_lanes.h"
#include "datagen/index.h"
#include "datagen/kept_file.h"
#include "datagen/phases.h"
#include "datagen/plan.h"
#include "datagen/run_options.h"
#include "datagen/sample_maker.h"
#include "datagen/sample_source.h"
#include "datagen/thread_stats.h"
#include "shared/crc32c.h"
#include "shared/dataset_meta.h"

namespace convoy::datagen {

class FileMaker {
 public:
  // lanes: the threads' GPU lanes with --gpu-resize, else nullptr; rank: for the log.
  // sharing: the ranks of this node per listed GPU (--gpu-route auto asks each for that many times
  // --gpu-min-saving).
  FileMaker(const RunOptions& opt, const InputIndex& index, const Plan& plan, const SampleSource& source, int threads,
            GpuLanes* lanes, int rank, int sharing = 1);

  using Report = std::function<void(uint64_t b, const BatchFileEntry& e)>;

  // Makes (or keeps) batch files `files` with all threads and hands each to `writer`; calls
  // `report` on this thread, the one that may use MPI, for each file written so far.
  void run(const std::vector<uint64_t>& files, BatchWriter& writer, const Report& report);
  // Waits for the writer's last files and reports them.
  void drain(BatchWriter& writer, const Report& report);
  // Wall seconds of run()'s parallel region.
  double region_seconds() const { return region_s_; }

  // The statistics of every sample made or kept, added to `total`.
  void add_sums_to(DatasetSums& total) { stats_.add_to(total); }
  Phases phases(BatchWriter& writer) const;
  int kept() const { return kept_; }
  const std::vector<std::pair<uint64_t, std::string>>& rejects() const { return rejects_; }

 private:
  class Thread;  // one OpenMP thread's share of the work (file_maker_thread.h)
  struct Round;  // what the threads share while they make the files

  // One parallel region for all the files (see Thread).
  void make_files(const std::vector<uint64_t>& files, BatchWriter& writer, const Report& report);
  static void report_written(BatchWriter& writer, const Report& report);
  // The sample ids batch file b is planned to hold, in slot order.
  std::vector<uint64_t> planned(uint64_t b) const;
  // Batch file b from an earlier run, when it can be kept: its samples go into the statistics
  // and the file to the writer, with the memory begun for it. Returns whether it was kept.
  bool keep(uint64_t b, const std::vector<uint64_t>& ids, BatchWriter& writer, FileBuffer& buffer, Phases& t);
  // Samples no batch file will hold, and why (any thread).
  void add_rejects(const std::vector<std::pair<uint64_t, std::string>>& rejected);
  // --gpu-route auto: whether the GPU pays for the files from files[next] on (see the .cpp);
  // starts it if so.
  bool start_gpu_if_it_pays(double resize_s, double images, const std::vector<uint64_t>& files, size_t next);

  const RunOptions& opt_;
  const InputIndex& index_;
  const Plan& plan_;
  const int threads_;
  const ImageShape shape_;
  GpuLanes* const lanes_;  // one GpuLane per OpenMP thread, with --gpu-resize
  const int rank_;
  const int sharing_;
  const SampleMaker samples_;
  const Crc32cAppend append_;  // raw samples' checksums joined into their file's
  const FileKeeper keeper_;
  ThreadStats stats_;
  Phases phases_;
  std::mutex rejects_mu_;
  std::vector<std::pair<uint64_t, std::string>> rejects_;
  int kept_ = 0;
  double region_s_ = 0;
};

}  // namespace convoy::datagen
