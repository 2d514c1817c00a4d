// The work of a rank's batch files, handed out a piece at a time to whichever thread asks next:
// the samples of the files already begun, in file and slot order, and then the beginning of the
// next file. A thread with no sample left in one file so goes on with the next file's samples
// instead of waiting for the other threads to finish the last ones of the current file.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>

namespace convoy::datagen {

class WorkQueue {
 public:
  struct Item {
    enum Kind { none, begin, sample } kind = none;
    size_t file = 0;  // position among the rank's files
    size_t slot = 0;  // sample: its slot in the file
  };

  explicit WorkQueue(size_t files) : files_(files) {}

  // The next piece of work; none once everything is handed out (or after stop()). While nothing
  // but files still being begun is left, waits for their samples, calling before_wait (if any)
  // first, without the lock: a thread must flush what it holds back before it blocks.
  Item next(const std::function<void()>& before_wait = {});
  // The file handed out as `begin` has `samples` samples to make (0: none, e.g. it was kept).
  void begun(size_t file, size_t samples);
  // After an error: next() answers none from now on.
  void stop();
  // How many files have been begun so far.
  size_t files_begun();

 private:
  struct Open {
    size_t file, next_slot, samples;
  };
  const size_t files_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<Open> open_;  // begun files with samples not yet handed out
  size_t next_file_ = 0, beginning_ = 0;
  bool stopped_ = false;
};

}  // namespace convoy::datagen
