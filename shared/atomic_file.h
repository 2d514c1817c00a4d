// Files that appear complete or not at all: written under a temporary name in the same folder,
// fsync'ed, then renamed over the final name (and the folder fsync'ed), so a crash never leaves
// a file at the final name that looks complete but is not. A name that cannot be renamed over is
// written straight instead: "-" (standard output), a descriptor's name (/dev/stdout, /dev/fd/N)
// or an existing device, FIFO or other file that is neither a regular file nor a folder.
#pragma once
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

namespace convoy {

class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();  // removes the temporary file unless commit() succeeded
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);  // appends
  void pwrite(const void* data, size_t n, uint64_t offset);
  // As pwrite, but past the page cache (O_DIRECT) where the file system allows it, which spares the
  // copy into the cache and its CPU time; else as pwrite. data, n and offset must be multiples of
  // kDirectAlign. Safe from several threads at once on disjoint ranges.
  static constexpr size_t kDirectAlign = 4096;
  void pwrite_direct(const void* data, size_t n, uint64_t offset);
  void resize(uint64_t n);  // truncates or extends (with zeros)
  void commit();            // fsync, rename, fsync folder
  const std::string& path() const { return path_; }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  int direct_fd_ = -2;  // -2: not opened yet; -1: the file system refuses O_DIRECT
  std::mutex direct_mu_;
  bool committed_ = false;
  bool straight_ = false;  // written in place: no temporary file, no rename
};

void write_file_atomic(const std::string& path, const std::string& content);
// The name that an AtomicFile's temporary called `name` is renamed to, or "" when `name` is not
// one: exactly "<final>.tmp.<pid>", the pid in decimal digits (so "index.tsv.tmp.old" is not).
std::string atomic_final_name(const std::string& name);
std::string read_whole_file(const std::string& path);
bool file_exists(const std::string& path);
// Creates the folder and its parents; fails with the path and reason.
void make_dirs(const std::string& path);
std::string join_path(const std::string& dir, const std::string& name);

}  // namespace convoy
