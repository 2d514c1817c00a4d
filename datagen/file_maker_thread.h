// The inside of FileMaker's parallel region: what its threads share while they make a rank's
// files (Round), and one thread's loop (Thread): take work, make it, finish files for the writer.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "datagen/file_maker.h"
#include "datagen/work_queue.h"

namespace convoy::datagen {

struct FileMaker::Round {
  Round(const std::vector<uint64_t>& files, BatchWriter& writer, const Report& report, bool judged)
      : files(files), writer(writer), report(report), queue(files.size()), jobs(files.size()), judged(judged) {}

  // The first error ends the round: the queue hands out nothing more and the writers stop.
  void fail(const std::exception& e);

  const std::vector<uint64_t>& files;          // the rank's batch files; work items name positions in it
  BatchWriter& writer;                         // where finished (and kept) files go
  const Report& report;                        // for each file written, on thread 0
  WorkQueue queue;                             // beginnings of files, then their samples
  std::vector<std::unique_ptr<FileJob>> jobs;  // per position: the file while its samples are made
  std::atomic<bool> judged;                    // --gpu-route auto: the GPU's start was judged (or needs no judging)
  std::mutex fatal_mu;
  std::string fatal;  // the first error, if any
};

// One OpenMP thread. It takes the next piece of work from the queue, whichever file it belongs
// to: the beginning of a file (kept from an earlier run, or set up for its samples) or one sample.
// The thread that finishes a file's last sample puts the file together and hands it to the
// writer threads; no thread waits at the end of a file.
// With --gpu-resize, a thread whose GPU lane is ready sends each sample where the lane's router
// says; the GPU's results come back to their slots whenever the lane's batches are done, and the
// thread flushes its lane before it would block, so that no file waits for samples held back.
// Under --gpu-route auto the first thread to have resized kRouteSamples images, or to finish a
// file, judges from its own resize time whether the GPU pays for the files not yet begun, and
// starts it if so: a run that leaves the GPU off runs exactly the CPU path, plus that judgement.
class FileMaker::Thread {
 public:
  // t: this thread's phases.
  Thread(FileMaker& maker, Round& round, int tid, Phases& t);
  Thread(const Thread&) = delete;
  Thread& operator=(const Thread&) = delete;

  // Takes and does work until none is left (or the round fails), then drains its GPU lane.
  void run();

 private:
  static constexpr double kRouteSamples = 32;

  // Takes one piece of work and does it; false when none is left.
  bool take_and_do();
  // Work taken: the beginning of the file at position `file`.
  void begin_file(size_t file);
  // Work taken: one sample, made here or sent to the GPU lane.
  void make_sample(size_t file, size_t slot);
  // The file's sample in `slot` is done (made or rejected); returns whether it was the last, which
  // finishes the file.
  bool sample_done(size_t file, size_t slot);
  // The file's samples are all done: assembled in slot order and handed to the writer.
  void finish_file(size_t file);
  // A sample the GPU resized, back into its slot (tag: the file's position << 32 | slot).
  void deliver(size_t tag, const uint8_t* pixels);
  // Every sample the lane holds, resized and delivered: before this thread blocks, and at the end.
  void flush_lane();
  // Sample `id`'s resized pixels (before any JPEG encoding) checksummed (raw output: into `crc`)
  // and added to the statistics, while in cache; `path` counts where it was resized.
  // `bytes`: the sample's, where sizes vary; 0: the shape's.
  void add_to_stats(uint64_t id, const uint8_t* pixels, uint32_t* crc, double& path, size_t bytes = 0);
  void judge_gpu(bool finished_a_file);
  void add_lane_times();

  FileMaker& maker_;
  Round& round_;
  const int tid_;
  Phases& t_;
  GpuLane* lane_ = nullptr;  // this thread's, once the lanes are ready
  GpuResizeTimes lane_before_;
  // JPEG output: a sample resized on the CPU, before encoding; where sizes vary, every sample
  // (grown to the largest).
  std::vector<uint8_t> pixels_;
  const GpuLane::Deliver deliver_;     // deliver(), for the lane
  const std::function<void()> flush_;  // flush_lane(), for whatever this thread may block in
};

}  // namespace convoy::datagen
