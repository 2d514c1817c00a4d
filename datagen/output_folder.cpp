// The lock is a file in the folder (not the folder itself), so that it works wherever flock does
// (NFS included), removed by the run that held it; where the file system has no locks at all the
// run goes on and says so.
#include "datagen/output_folder.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <vector>

#include "datagen/dataset_files.h"
#include "shared/atomic_file.h"
#include "shared/error.h"
#include "shared/log.h"

namespace convoy::datagen {
namespace {

bool same_file(int fd, const std::string& path) {
  struct stat open_one {
  }, named{};
  return ::fstat(fd, &open_one) == 0 && ::stat(path.c_str(), &named) == 0 && open_one.st_dev == named.st_dev &&
         open_one.st_ino == named.st_ino;
}

std::unique_ptr<OutputLock> lock_folder(const std::string& dir) {
  const std::string path = join_path(dir, kLockFile);
  for (;;) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) fail_file(path, "cannot create the output folder's lock file: " + errno_text());
    auto lock = std::make_unique<OutputLock>(fd, path);
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      if (errno == EWOULDBLOCK) {
        lock->release_without_removing();
        fail_file(dir, "is in use by another datagen run (it holds " + std::string(kLockFile) +
                           "); wait for that run to end, or give another --output");
      }
      log_warn("%s: the file system cannot lock %s (%s): a second datagen run into this folder would not be noticed",
               dir.c_str(), kLockFile, errno_text().c_str());
      return lock;
    }
    // A run that ended between our open and our flock removed the file we hold: lock the new one.
    if (same_file(fd, path)) return lock;
    lock->release_without_removing();
  }
}

// The folder's entries: datagen's temporaries (to remove), and the first other entry by name
// (the lock aside), if any.
struct Contents {
  std::vector<std::filesystem::path> temporaries;
  std::string first_other;
  bool has_run_file = false;
};

Contents list_folder(const std::string& dir) {
  namespace fs = std::filesystem;
  Contents c;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code type_ec;
    const bool file = it->symlink_status(type_ec).type() == fs::file_type::regular;
    const std::string final_name = atomic_final_name(name);
    if (file && !final_name.empty() && is_dataset_file_name(final_name)) {
      c.temporaries.push_back(it->path());
      continue;
    }
    c.has_run_file |= file && name == kRunFile;
    if (name != kLockFile && (c.first_other.empty() || name < c.first_other)) c.first_other = name;
  }
  if (ec) fail_file(dir, "cannot list the output folder: " + ec.message());
  return c;
}

}  // namespace

OutputLock::~OutputLock() {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());  // while still held, so no other run can hold this file meanwhile
  ::close(fd_);             // releases the flock
}

void OutputLock::release_without_removing() {
  ::close(fd_);
  fd_ = -1;
}

std::unique_ptr<OutputLock> claim_output(const std::string& dir) {
  make_dirs(dir);
  std::unique_ptr<OutputLock> lock = lock_folder(dir);
  const Contents c = list_folder(dir);
  // Without the run file, which a run writes before anything else of its output, no file here
  // but the lock and temporaries is datagen's: a user's index.tsv looks like datagen's own.
  if (!c.has_run_file && !c.first_other.empty())
    fail_file(dir, "holds files datagen did not make ('" + c.first_other + "'; a folder datagen made holds its " +
                       kRunFile + "); give an empty or new folder as --output");
  for (const auto& t : c.temporaries) {
    std::error_code ec;
    std::filesystem::remove(t, ec);
  }
  return lock;
}

}  // namespace convoy::datagen
