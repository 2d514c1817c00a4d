// Streamed inputs are decompressed here rather than by libarchive's filters: those fill a whole
// output block (64 KiB and more) before handing any of it on, so on a cut or damaged stream the
// members in the last block before the damage were lost with it. Each codec below hands on every
// byte its library can produce; the read loop reports the damage only once they are all out.
#include "datagen/stream_decoder.h"

#include <bzlib.h>
#include <lzma.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "shared/error.h"

namespace convoy::datagen {

enum class Step { more, stream_end, failed };

class StreamCodec {
 public:
  virtual ~StreamCodec() = default;
  virtual const char* name() const = 0;
  // True when p (n bytes: at least 6, or what is left of the file) starts a stream of this format.
  virtual bool starts_stream(const unsigned char* p, size_t n) const = 0;
  // Decodes from [in, in + in_len) into [out, out + out_len); used and made tell how much of each.
  // finish: no input follows what is given. stream_end: a whole stream (member, frame) is out.
  virtual Step decode(const unsigned char* in, size_t in_len, bool finish, unsigned char* out, size_t out_len,
                      size_t& used, size_t& made, std::string& why) = 0;
  // Ready for a further stream, concatenated after the one that ended.
  virtual void restart() = 0;
};

namespace {

constexpr size_t kInBytes = 256 << 10, kOutBytes = 256 << 10, kMagicBytes = DecompressedFile::kMagicBytes;
// xz's dictionary size comes from the file: a hostile one could ask for gigabytes. xz -9 needs 64 MiB.
constexpr uint64_t kXzMemoryLimit = 1ull << 30;

bool is_gzip(const unsigned char* p, size_t n) { return n >= 2 && p[0] == 0x1F && p[1] == 0x8B; }
bool is_bzip2(const unsigned char* p, size_t n) { return n >= 3 && p[0] == 'B' && p[1] == 'Z' && p[2] == 'h'; }
bool is_xz(const unsigned char* p, size_t n) {
  static const unsigned char magic[6] = {0xFD, '7', 'z', 'X', 'Z', 0x00};
  return n >= 6 && std::memcmp(p, magic, 6) == 0;
}
bool is_zstd(const unsigned char* p, size_t n) {
  if (n < 4) return false;
  const bool frame = p[0] == 0x28 && p[1] == 0xB5 && p[2] == 0x2F && p[3] == 0xFD;
  const bool skippable = (p[0] & 0xF0) == 0x50 && p[1] == 0x2A && p[2] == 0x4D && p[3] == 0x18;
  return frame || skippable;
}

class GzipCodec final : public StreamCodec {
 public:
  GzipCodec() {
    if (inflateInit2(&z_, 16 + MAX_WBITS) != Z_OK) throw std::bad_alloc();
  }
  ~GzipCodec() override { inflateEnd(&z_); }
  const char* name() const override { return "gzip"; }
  bool starts_stream(const unsigned char* p, size_t n) const override { return is_gzip(p, n); }
  Step decode(const unsigned char* in, size_t in_len, bool, unsigned char* out, size_t out_len, size_t& used,
              size_t& made, std::string& why) override {
    z_.next_in = const_cast<Bytef*>(in);
    z_.avail_in = uInt(in_len);
    z_.next_out = out;
    z_.avail_out = uInt(out_len);
    const int rc = inflate(&z_, Z_NO_FLUSH);
    used = in_len - z_.avail_in;
    made = out_len - z_.avail_out;
    if (rc == Z_STREAM_END) return Step::stream_end;
    if (rc == Z_OK || rc == Z_BUF_ERROR) return Step::more;
    why = std::string("gzip data is damaged: ") + (z_.msg ? z_.msg : "inflate failed");
    return Step::failed;
  }
  void restart() override { inflateReset(&z_); }

 private:
  z_stream z_{};
};

class Bzip2Codec final : public StreamCodec {
 public:
  Bzip2Codec() { init(); }
  ~Bzip2Codec() override { BZ2_bzDecompressEnd(&b_); }
  const char* name() const override { return "bzip2"; }
  bool starts_stream(const unsigned char* p, size_t n) const override { return is_bzip2(p, n); }
  Step decode(const unsigned char* in, size_t in_len, bool, unsigned char* out, size_t out_len, size_t& used,
              size_t& made, std::string& why) override {
    b_.next_in = reinterpret_cast<char*>(const_cast<unsigned char*>(in));
    b_.avail_in = unsigned(in_len);
    b_.next_out = reinterpret_cast<char*>(out);
    b_.avail_out = unsigned(out_len);
    const int rc = BZ2_bzDecompress(&b_);
    used = in_len - b_.avail_in;
    made = out_len - b_.avail_out;
    if (rc == BZ_STREAM_END) return Step::stream_end;
    if (rc == BZ_OK) return Step::more;
    why = rc == BZ_MEM_ERROR ? "bzip2: out of memory"
                             : "bzip2 data is damaged (libbz2 error " + std::to_string(rc) + ")";
    return Step::failed;
  }
  void restart() override {
    BZ2_bzDecompressEnd(&b_);
    init();
  }

 private:
  void init() {
    b_ = bz_stream{};
    if (BZ2_bzDecompressInit(&b_, 0, 0) != BZ_OK) throw std::bad_alloc();
  }
  bz_stream b_{};
};

class XzCodec final : public StreamCodec {
 public:
  XzCodec() { restart(); }
  ~XzCodec() override { lzma_end(&s_); }
  const char* name() const override { return "xz"; }
  bool starts_stream(const unsigned char* p, size_t n) const override { return is_xz(p, n); }
  Step decode(const unsigned char* in, size_t in_len, bool finish, unsigned char* out, size_t out_len, size_t& used,
              size_t& made, std::string& why) override {
    s_.next_in = in;
    s_.avail_in = in_len;
    s_.next_out = out;
    s_.avail_out = out_len;
    const lzma_ret rc = lzma_code(&s_, finish ? LZMA_FINISH : LZMA_RUN);
    used = in_len - s_.avail_in;
    made = out_len - s_.avail_out;
    if (rc == LZMA_STREAM_END) return Step::stream_end;
    if (rc == LZMA_OK || rc == LZMA_BUF_ERROR) return Step::more;
    why = rc == LZMA_MEMLIMIT_ERROR ? "xz stream needs more than 1 GiB of memory to decode"
          : rc == LZMA_MEM_ERROR    ? "xz: out of memory"
                                    : "xz data is damaged (liblzma error " + std::to_string(int(rc)) + ")";
    return Step::failed;
  }
  // lzma_stream_decoder takes a stream already used and keeps its allocations.
  void restart() override {
    if (lzma_stream_decoder(&s_, kXzMemoryLimit, 0) != LZMA_OK) throw std::bad_alloc();
  }

 private:
  lzma_stream s_ = LZMA_STREAM_INIT;
};

class ZstdCodec final : public StreamCodec {
 public:
  ZstdCodec() : d_(ZSTD_createDStream()) {
    if (!d_) throw std::bad_alloc();
    ZSTD_initDStream(d_);
  }
  ~ZstdCodec() override { ZSTD_freeDStream(d_); }
  const char* name() const override { return "zstd"; }
  bool starts_stream(const unsigned char* p, size_t n) const override { return is_zstd(p, n); }
  Step decode(const unsigned char* in, size_t in_len, bool, unsigned char* out, size_t out_len, size_t& used,
              size_t& made, std::string& why) override {
    ZSTD_inBuffer ib{in, in_len, 0};
    ZSTD_outBuffer ob{out, out_len, 0};
    const size_t rc = ZSTD_decompressStream(d_, &ob, &ib);
    used = ib.pos;
    made = ob.pos;
    if (ZSTD_isError(rc)) {
      why = std::string("zstd data is damaged: ") + ZSTD_getErrorName(rc);
      return Step::failed;
    }
    return rc == 0 ? Step::stream_end : Step::more;  // 0: the frame is whole and all of it is out
  }
  void restart() override { ZSTD_DCtx_reset(d_, ZSTD_reset_session_only); }

 private:
  ZSTD_DStream* d_;
};

}  // namespace

std::unique_ptr<DecompressedFile> DecompressedFile::open(int fd, uint64_t file_size, const unsigned char* head,
                                                         size_t n) {
  std::unique_ptr<StreamCodec> codec;
  if (is_gzip(head, n))
    codec = std::make_unique<GzipCodec>();
  else if (is_bzip2(head, n))
    codec = std::make_unique<Bzip2Codec>();
  else if (is_xz(head, n))
    codec = std::make_unique<XzCodec>();
  else if (is_zstd(head, n))
    codec = std::make_unique<ZstdCodec>();
  else
    return nullptr;
  return std::unique_ptr<DecompressedFile>(new DecompressedFile(fd, file_size, std::move(codec)));
}

DecompressedFile::DecompressedFile(int fd, uint64_t file_size, std::unique_ptr<StreamCodec> codec)
    : fd_(fd), file_size_(file_size), codec_(std::move(codec)), in_(new unsigned char[kInBytes]),
      out_(new unsigned char[kOutBytes]) {}

DecompressedFile::~DecompressedFile() = default;

const char* DecompressedFile::format() const { return codec_->name(); }

// Appends to the unread input, moving it to the front first; false on a read error.
bool DecompressedFile::refill() {
  if (in_at_ > 0) {
    std::memmove(in_.get(), in_.get() + in_at_, in_len_);
    in_at_ = 0;
  }
  if (in_len_ == kInBytes) return true;
  ssize_t got;
  do got = ::pread(fd_, in_.get() + in_len_, kInBytes - in_len_, static_cast<off_t>(file_pos_));
  while (got < 0 && errno == EINTR);
  if (got < 0) {
    error_ = "read failed at byte " + std::to_string(file_pos_) + ": " + errno_text();
    io_failed_ = true;
    return false;
  }
  file_pos_ += uint64_t(got);
  in_len_ += size_t(got);
  if (got == 0) eof_ = true;
  return true;
}

// After a stream ends, another may follow (concatenated .gz files, pbzip2's output, multi-stream
// xz and zstd): decoded as one, as the command-line tools do. NUL padding between them is skipped;
// anything else is ignored, as gzip -d ignores trailing garbage.
bool DecompressedFile::next_stream() {
  for (;;) {
    while (in_len_ > 0 && in_[in_at_] == 0) ++in_at_, --in_len_;
    if (in_len_ >= kMagicBytes || eof_) break;
    if (!refill()) return false;
  }
  if (in_len_ == 0 || !codec_->starts_stream(in_.get() + in_at_, in_len_)) return false;
  codec_->restart();
  return true;
}

ptrdiff_t DecompressedFile::read(const void** out) {
  *out = out_.get();
  size_t made = 0;
  while (made < kOutBytes && !done_ && error_.empty()) {
    if (in_len_ == 0 && !eof_ && !refill()) break;
    size_t used = 0, got = 0;
    std::string why;
    const Step s = codec_->decode(in_.get() + in_at_, in_len_, eof_, out_.get() + made, kOutBytes - made, used, got,
                                  why);
    in_at_ += used;
    in_len_ -= used;
    made += got;
    if (s == Step::failed) {
      error_ = why + " (near byte " + std::to_string(file_pos_ - in_len_) + ")";
    } else if (s == Step::stream_end) {
      if (!next_stream() && error_.empty()) done_ = true;
    } else if (used == 0 && got == 0) {
      // Nothing moved: the decoder wants input that is not in the buffer.
      if (eof_)
        error_ = std::string("truncated ") + codec_->name() + " input (the file ends at byte " +
                 std::to_string(file_size_) + ", inside the compressed stream)";
      else if (in_len_ == kInBytes)
        error_ = std::string(codec_->name()) + " data cannot be decoded (near byte " +
                 std::to_string(file_pos_ - in_len_) + ")";
      else if (!refill())
        break;
    }
  }
  if (made > 0 || error_.empty()) return ptrdiff_t(made);
  return -1;
}

}  // namespace convoy::datagen
