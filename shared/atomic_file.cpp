// Temporary name, fsync, rename: the one way convoy writes any output file.
#include "shared/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "shared/error.h"

namespace convoy {
namespace {

constexpr const char* kTemporaryInfix = ".tmp.";  // <final>.tmp.<pid>

std::string parent_dir(const std::string& path) {
  auto p = std::filesystem::path(path).parent_path();
  return p.empty() ? std::string(".") : p.string();
}

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;  // some file systems cannot open folders; the rename still stands
  ::fsync(fd);
  ::close(fd);
}

// The descriptor that "-" or a descriptor's name stands for, else -1. Such a name is written through
// the descriptor itself: opening /dev/stdout anew reopens its file, from the start, over what a
// shell's >> appended to, and renaming over it would replace the link (as root, even in /dev).
int named_descriptor(const std::string& path) {
  if (path == "-" || path == "/dev/stdout") return 1;
  if (path == "/dev/stderr") return 2;
  for (const std::string prefix : {"/dev/fd/", "/proc/self/fd/"}) {
    if (path.size() <= prefix.size() || path.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string digits = path.substr(prefix.size());
    if (digits.size() > 6 || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
    return std::stoi(digits);
  }
  return -1;
}

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  // Written in place, errors name the path itself (tmp_ is what write() reports).
  if (const int fd = named_descriptor(path_); fd >= 0) {
    straight_ = true;
    tmp_ = path_;
    fd_ = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (fd_ < 0) fail_file(path_, "cannot write to it: " + errno_text());
    return;
  }
  // A device or FIFO cannot take a rename (and /dev/null must never be replaced by a file).
  struct stat st;
  if (::stat(path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
    straight_ = true;
    tmp_ = path_;
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY);
    if (fd_ < 0) fail_file(path_, "cannot open: " + errno_text());
    return;
  }
  tmp_ = path_ + kTemporaryInfix + std::to_string(::getpid());
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail_file(tmp_, "cannot create: " + errno_text());
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (direct_fd_ >= 0) ::close(direct_fd_);
  if (!committed_ && !straight_) ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail_file(tmp_, "write failed: " + errno_text());
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void AtomicFile::pwrite(const void* data, size_t n, uint64_t offset) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::pwrite(fd_, p, n, static_cast<off_t>(offset));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail_file(tmp_, "write failed: " + errno_text());
    p += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
}

void AtomicFile::pwrite_direct(const void* data, size_t n, uint64_t offset) {
  int fd = -1;
  {
    std::lock_guard<std::mutex> lock(direct_mu_);
    if (direct_fd_ == -2 && !straight_) direct_fd_ = ::open(tmp_.c_str(), O_WRONLY | O_DIRECT | O_CLOEXEC);
    fd = direct_fd_;
  }
  const char* p = static_cast<const char*>(data);
  while (n > 0 && fd >= 0) {
    ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(offset));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EINVAL) break;  // not for direct I/O after all: the cached way below
    if (w <= 0) fail_file(tmp_, "write failed: " + errno_text());
    p += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
  if (n > 0) pwrite(p, n, offset);
}

void AtomicFile::resize(uint64_t n) {
  if (::ftruncate(fd_, static_cast<off_t>(n)) != 0) fail_file(tmp_, "cannot set its size: " + errno_text());
}

void AtomicFile::commit() {
  if (straight_) {
    // Pipes and terminals cannot be fsync'ed; a failed close still reports a lost write.
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0 && errno != EINTR) fail_file(path_, "close failed: " + errno_text());
    committed_ = true;
    return;
  }
  if (direct_fd_ >= 0) {  // its writes reached the device; the fsync below makes them durable
    ::close(direct_fd_);
    direct_fd_ = -1;
  }
  if (::fsync(fd_) != 0) fail_file(tmp_, "fsync failed: " + errno_text());
  if (::close(fd_) != 0) {
    fd_ = -1;
    fail_file(tmp_, "close failed: " + errno_text());
  }
  fd_ = -1;
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) fail_file(path_, "rename failed: " + errno_text());
  committed_ = true;
  fsync_dir(parent_dir(path_));
}

void write_file_atomic(const std::string& path, const std::string& content) {
  AtomicFile f(path);
  f.write(content.data(), content.size());
  f.commit();
}

std::string atomic_final_name(const std::string& name) {
  const size_t at = name.rfind(kTemporaryInfix);
  if (at == std::string::npos || at == 0) return "";
  const std::string pid = name.substr(at + std::strlen(kTemporaryInfix));
  if (pid.empty() || pid.size() > 10 || pid.find_first_not_of("0123456789") != std::string::npos) return "";
  return name.substr(0, at);
}

std::string read_whole_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_file(path, "cannot open: " + errno_text());
  std::string out;
  char buf[1 << 16];
  for (;;) {
    ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      std::string why = errno_text();
      ::close(fd);
      fail_file(path, "read failed: " + why);
    }
    if (r == 0) break;
    out.append(buf, static_cast<size_t>(r));
  }
  ::close(fd);
  return out;
}

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

void make_dirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) fail_file(path, "cannot create folder: " + ec.message());
}

std::string join_path(const std::string& dir, const std::string& name) {
  return (std::filesystem::path(dir) / name).string();
}

}  // namespace convoy
