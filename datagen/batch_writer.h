// A rank's batch-file writers: finished batch files are written (temporary name, fsync, rename) on
// threads of their own, several at once, so decoding never waits for a write; and a bound on how
// many batch files the rank holds in memory, made, waiting or being written, at any time.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "shared/batch_file.h"
#include "shared/dataset_meta.h"

namespace convoy::datagen {

// How many batch files of `file_bytes` a rank of `threads` threads holds at once: the one being
// made, the end of the one before, and those being written, by one writer per two threads (a
// writer spends most of a file waiting for fsync, and at 16 threads a file is made in a few ms);
// fewer when they are large, so that they stay within 8 GiB (a file is at most 4 GiB).
size_t batch_files_in_memory(double file_bytes, int threads);

class BatchWriter {
 public:
  // dir: the output folder; in_memory: batch files held at most (at least 2); writers: threads
  // writing at once.
  BatchWriter(std::string dir, size_t in_memory, int writers);
  ~BatchWriter();  // stops and joins the writers; unwritten files are dropped
  BatchWriter(const BatchWriter&) = delete;
  BatchWriter& operator=(const BatchWriter&) = delete;

  // Waits until one more batch file may be held; returns a buffer for its images, one that a
  // written file no longer needs when there is one (its pages are already mapped), of whatever
  // size and contents it had. Every begin_file() is followed by one submit(), unless the run
  // fails. Throws the error that stopped the writers, if any. before_wait (if any) is called,
  // without the lock, before it blocks: a thread must first finish what the held files wait for.
  std::vector<uint8_t> begin_file(const std::function<void()>& before_wait = {});
  // Hands over batch file b, made; kept: it is on disk already and verified, only its header is
  // read for the entry.
  void submit(uint64_t b, Batch batch, bool kept);
  // The run fails: the writers stop, and begin_file(), submit() and finish() throw `why`.
  void stop(const std::string& why);
  // The files written since the last call, with their dataset.json entries.
  std::vector<std::pair<uint64_t, BatchFileEntry>> take_written();
  // Waits until every begun file is written; throws the error that stopped the writers, if any.
  void finish();
  double write_seconds();  // summed over the writer threads

 private:
  struct Job {
    uint64_t b;
    Batch batch;
    bool kept;
  };
  void write_loop();
  void throw_if_failed();  // with mu_ held

  const std::string dir_;
  const size_t in_memory_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<Job> queue_;  // submitted, not yet taken by a writer
  size_t held_ = 0;        // begun and not yet written
  std::vector<std::vector<uint8_t>> spare_;
  std::vector<std::pair<uint64_t, BatchFileEntry>> written_;
  std::string error_;
  double write_seconds_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace convoy::datagen
