// datagen's claim on its output folder: a lock held for the whole run, and the check, before
// anything in the folder is touched, that it holds nothing of anyone else's.
#pragma once
#include <memory>
#include <string>
#include <utility>

namespace convoy::datagen {

// The folder's lock file, flock'ed exclusively while the object lives (RAII) and removed when it
// ends; a process that dies releases its flock, and the file it leaves is the next run's to lock.
class OutputLock {
 public:
  OutputLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~OutputLock();
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;
  // Closes the file, leaving it where it is (it is another run's, or not the one at its name).
  void release_without_removing();

 private:
  int fd_;
  std::string path_;
};

// Rank 0, before the scan: creates the folder, takes its lock (a folder another run holds is
// refused at once), refuses a folder that holds files datagen did not make unless it holds
// datagen's run file (datagen_run.json: a folder of its own, to be resumed or refused by
// prepare_output), and removes the temporaries that a killed run left, recognised exactly by the
// name AtomicFile gives them. A user's file is never removed or written over.
std::unique_ptr<OutputLock> claim_output(const std::string& dir);

}  // namespace convoy::datagen
