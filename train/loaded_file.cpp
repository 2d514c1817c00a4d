// Batch files into kept buffers. pread, not mmap: a file cut short while mapped would end the
// process with SIGBUS instead of one line naming the file.
#include "train/loaded_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <turbojpeg.h>
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

struct TjHandle {
  tjhandle h = tjInitDecompress();
  ~TjHandle() {
    if (h) tjDestroy(h);
  }
};

void decode_jpegs(const std::string& path, const BatchView& v, const ImageShape& shape, uint8_t* out) {
  thread_local TjHandle tj;
  if (!tj.h) fail_file(path, "cannot start the JPEG decoder");
  if (shape.channels != 1 && shape.channels != 3)
    fail_file(path, "JPEG samples need 1 or 3 channels, not " + std::to_string(shape.channels));
  const int pf = shape.channels == 1 ? TJPF_GRAY : TJPF_RGB;
  const uint8_t* images = v.images();
  for (size_t i = 0; i < v.count(); ++i) {
    const uint64_t a = v.offset(i), e = v.offset(i + 1);
    int w = 0, h = 0, sub = 0, cs = 0;
    if (tjDecompressHeader3(tj.h, images + a, (unsigned long)(e - a), &w, &h, &sub, &cs) != 0)
      fail_file(path, "sample " + std::to_string(i) + ": " + tjGetErrorStr2(tj.h));
    if (w != int(shape.width) || h != int(shape.height))
      fail_file(path, "sample " + std::to_string(i) + ": JPEG is " + std::to_string(w) + "x" + std::to_string(h) +
                          ", dataset.json says " + std::to_string(shape.width) + "x" + std::to_string(shape.height));
    if (tjDecompress2(tj.h, images + a, (unsigned long)(e - a), out + i * shape.bytes(), w, 0, h, pf,
                      TJFLAG_ACCURATEDCT) != 0)
      fail_file(path, "sample " + std::to_string(i) + ": " + tjGetErrorStr2(tj.h));
  }
}

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
  pixels_ = nullptr;
  labels_.clear();
  ids_.clear();
  const BatchView v = read_verified(path, bytes_);
  if (!(v.shape() == shape))
    fail_file(path, "image shape " + std::to_string(v.header.height) + "x" + std::to_string(v.header.width) + "x" +
                        std::to_string(v.header.channels) + " differs from dataset.json");
  const size_t n = v.count();
  labels_.resize(n);
  ids_.resize(n);
  for (size_t i = 0; i < n; ++i) labels_[i] = v.label(i), ids_[i] = v.id(i);
  sample_bytes_ = shape.bytes();
  if (v.header.encoding == uint32_t(Encoding::raw)) {
    pixels_ = v.images();
    return;
  }
  uint8_t* out = decoded_.reserve(n * sample_bytes_);
  decode_jpegs(path, v, shape, out);
  pixels_ = out;
}

}  // namespace convoy
