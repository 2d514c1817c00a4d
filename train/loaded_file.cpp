// Batch files into kept buffers. pread, not mmap: a file cut short while mapped would end the
// process with SIGBUS instead of one line naming the file.
#include "train/loaded_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <cerrno>

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

size_t read_file_into(const std::string& path, ByteBuffer& buf) {
  Fd f(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (f.fd < 0) fail_file(path, "cannot open: " + errno_text());
  struct stat st;
  if (::fstat(f.fd, &st) != 0) fail_file(path, "cannot stat: " + errno_text());
  const size_t size = size_t(st.st_size);
  // The whole file is wanted, front to back: let the kernel read ahead aggressively.
  ::posix_fadvise(f.fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  uint8_t* p = buf.reserve(size);
  size_t got = 0;
  while (got < size) {
    const ssize_t r = ::pread(f.fd, p + got, size - got, off_t(got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail_file(path, "read failed: " + errno_text());
    if (r == 0) fail_file(path, "truncated while being read: " + std::to_string(got) + " of " +
                                    std::to_string(size) + " bytes");
    got += size_t(r);
  }
  return size;
}

void LoadedFile::load(const std::string& path, const ImageShape& shape) {
  pixels_ = nullptr;
  labels_.clear();
  ids_.clear();
  const size_t size = read_file_into(path, bytes_);
  const BatchView v = verify_batch(path, bytes_.data(), size);
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
