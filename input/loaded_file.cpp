// Batch files into kept buffers. pread, not mmap: a file cut short while mapped would end the
// process with SIGBUS instead of one line naming the file. A file is checked against dataset.json
// from its header, before the rest of it is read.
#include "input/loaded_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "shared/atomic_file.h"
#include "shared/crc32c.h"
#include "shared/error.h"
#include "shared/regular_file.h"

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

std::string crc_hex(uint32_t crc) {
  char s[16];
  std::snprintf(s, sizeof s, "%08x", crc);
  return s;
}

// A file sound by itself can still be the wrong one: another dataset's, or another file of this
// one under this name. The header CRC covers every section's CRC, which the reader then checks
// against the bytes, so a header that matches dataset.json's entry vouches for the whole file.
void check_listed(const std::string& path, const BatchHeader& h, const BatchFileEntry& want) {
  std::string differs;
  auto differ = [&](const std::string& what, const std::string& has, const std::string& listed) {
    if (has == listed) return;
    differs += (differs.empty() ? "" : ", ") + what + " " + has + " where dataset.json says " + listed;
  };
  differ("samples", std::to_string(h.count), std::to_string(want.count));
  differ("bytes", std::to_string(h.file_bytes), std::to_string(want.bytes));
  differ("header CRC", crc_hex(h.header_crc), crc_hex(want.crc32c));
  if (!differs.empty())
    fail_file(path, "not the file dataset.json lists under this name (" + differs +
                        "): another dataset's file, or another file of this one");
}

}  // namespace

namespace {}  // namespace

void require_one_shape(const DatasetMeta& meta, const std::string& dir) {
  if (meta.resize.varied)
    fail_file(join_path(dir, kDatasetJson),
              "holds whole images at their own sizes (batch-file format v2, datagen --resize short:S), which this "
              "reader needs at one shape; train and the Python module read them through their crop");
}

uint8_t* ByteBuffer::reserve(size_t n) {
  if (n > capacity_) {
    p_.reset();  // the old bytes are not needed: free them before the new allocation
    p_.reset(new uint8_t[n]);
    capacity_ = n;
  }
  return p_.get();
}

BatchView read_verified(const std::string& path, const BatchFileEntry& want, ByteBuffer& buf) {
  // O_NONBLOCK: opening a named pipe would wait for a writer; it only lets fstat see what it is
  // (a regular file's reads do not heed it).
  Fd f(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (f.fd < 0) fail_file(path, "cannot open: " + errno_text());
  struct stat st;
  if (::fstat(f.fd, &st) != 0) fail_file(path, "cannot stat: " + errno_text());
  require_regular_file(path, st);
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
  check_listed(path, h, want);
  const std::array<BatchSection, 5> sections = batch_sections(h);
  uint32_t crcs[5] = {0, 0, 0, 0, 0};
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

void LoadedFile::load(const std::string& path, const BatchFileEntry& want, const ImageShape& shape) {
  labels_.clear();
  ids_.clear();
  view_ = read_verified(path, want, bytes_);
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
