// Decompression of streamed inputs (gzip, bzip2, xz, zstd) ahead of the tar reader. Every byte the
// decoder can recover from a cut or damaged file is handed on before the error, so the members
// that lie wholly before the damage are kept.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace convoy::datagen {

class StreamCodec;

class DecompressedFile {
 public:
  // nullptr when the file at fd does not start like gzip, bzip2, xz or zstd; head: its first
  // bytes, as many as the file has up to kMagicBytes.
  static constexpr size_t kMagicBytes = 6;
  static std::unique_ptr<DecompressedFile> open(int fd, uint64_t file_size, const unsigned char* head, size_t n);
  ~DecompressedFile();
  DecompressedFile(const DecompressedFile&) = delete;
  DecompressedFile& operator=(const DecompressedFile&) = delete;

  // Points *out at the next decompressed bytes and returns their count; 0 at the end of the data;
  // -1 once nothing more can be recovered, error() then saying why (the bytes before are all out).
  ptrdiff_t read(const void** out);
  const std::string& error() const { return error_; }
  // Whether error() is a failed read of the file (a disk error), not damaged data.
  bool io_failed() const { return io_failed_; }
  const char* format() const;
  // Bytes of the file read so far (for the scan's progress).
  uint64_t file_position() const { return file_pos_; }

 private:
  DecompressedFile(int fd, uint64_t file_size, std::unique_ptr<StreamCodec> codec);
  bool refill();
  bool next_stream();

  int fd_;
  uint64_t file_size_, file_pos_ = 0;
  std::unique_ptr<StreamCodec> codec_;
  // Not zero-filled: every byte handed on was first written by a read or by the decoder.
  std::unique_ptr<unsigned char[]> in_, out_;
  size_t in_at_ = 0, in_len_ = 0;  // the unread input is in_[in_at_, in_at_ + in_len_)
  bool eof_ = false, done_ = false, io_failed_ = false;
  std::string error_;
};

}  // namespace convoy::datagen
