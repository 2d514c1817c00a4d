// Batch files into kept buffers. pread, not mmap: a file cut short while mapped would end the
// process with SIGBUS instead of one line naming the file.
#include "train/loaded_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "shared/crc32c.h"
#include "shared/error.h"

namespace convoy {
namespace {

struct Fd {
  int fd;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

}  // namespace

uint8_t* ByteBuffer::reserve(size_t n) {
  if (n > capacity_) {
    p_.reset();  // the old bytes are not needed: free them before the new allocation
    p_.reset(new uint8_t[n]);
    capacity_ = n;
  }
  return p_.get();
}

BatchView read_verified(const std::string& path, ByteBuffer& buf) {
  Fd f(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (f.fd < 0) fail_file(path, "cannot open: " + errno_text());
  struct stat st;
  if (::fstat(f.fd, &st) != 0) fail_file(path, "cannot stat: " + errno_text());
  const size_t size = size_t(st.st_size);
  // The whole file is wanted, front to back: let the kernel read ahead.
  ::posix_fadvise(f.fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  uint8_t* p = buf.reserve(size);
  auto read_range = [&](size_t a, size_t e) {
    while (a < e) {
      const ssize_t r = ::pread(f.fd, p + a, e - a, off_t(a));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) fail_file(path, "read failed: " + errno_text());
      if (r == 0)
        fail_file(path, "truncated while being read: " + std::to_string(a) + " of " + std::to_string(size) + " bytes");
      a += size_t(r);
    }
  };
  // Each chunk's checksum is taken while the chunk is still in the core's cache, so the file
  // crosses memory once, not twice.
  constexpr size_t kChunk = size_t(512) << 10;
  size_t a = 0, e = std::min(size, kChunk);
  read_range(a, e);
  const BatchHeader h = check_batch_header(path, p, size);
  const std::array<BatchSection, 4> sections = batch_sections(h);
  uint32_t crcs[4] = {0, 0, 0, 0};
  for (;;) {
    for (size_t i = 0; i < sections.size(); ++i) {
      const size_t lo = std::max(a, size_t(sections[i].begin)), hi = std::min(e, size_t(sections[i].end));
      if (lo < hi) crcs[i] = crc32c(p + lo, hi - lo, crcs[i]);
    }
    if (e == size) break;
    a = e;
    e = std::min(size, a + kChunk);
    read_range(a, e);
  }
  return verify_batch(path, p, size, crcs);
}

void LoadedFile::load(const std::string& path, const ImageShape& shape) {
  labels_.clear();
  ids_.clear();
  view_ = read_verified(path, bytes_);
  if (!(view_.shape() == shape))
    fail_file(path, "image shape " + std::to_string(view_.header.height) + "x" + std::to_string(view_.header.width) +
                        "x" + std::to_string(view_.header.channels) + " differs from dataset.json");
  encoding_ = Encoding(view_.header.encoding);
  if (encoding_ == Encoding::jpeg && shape.channels != 1 && shape.channels != 3)
    fail_file(path, "JPEG samples need 1 or 3 channels, not " + std::to_string(shape.channels));
  const size_t n = view_.count();
  labels_.resize(n);
  ids_.resize(n);
  for (size_t i = 0; i < n; ++i) labels_[i] = view_.label(i), ids_[i] = view_.id(i);
  sample_bytes_ = shape.bytes();
}

}  // namespace convoy
