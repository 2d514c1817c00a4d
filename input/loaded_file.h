// One batch file in the loader's memory: read with pread into a buffer that is kept for the next
// file, every checksum verified in place and the file checked against its dataset.json entry. JPEG
// samples stay compressed: the readers decode each one, or the part of it a crop needs, when they
// build its batch.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shared/batch_file.h"
#include "shared/dataset_meta.h"

namespace convoy {

// Grows, never shrinks, and leaves new bytes uninitialised: a file's bytes overwrite it whole,
// so zeroing it first would be a wasted pass over memory.
class ByteBuffer {
 public:
  uint8_t* reserve(size_t n);
  uint8_t* data() const { return p_.get(); }

 private:
  std::unique_ptr<uint8_t[]> p_;
  size_t capacity_ = 0;
};

class LoadedFile {
 public:
  // Replaces the contents with the file at `path`, which must be the file dataset.json lists as
  // `want` (its sample count, size and header CRC) with samples of `shape`; throws
  // Error("<path>: <problem>") for a file that is unreadable, damaged, or not what it should be.
  void load(const std::string& path, const BatchFileEntry& want, const ImageShape& shape);

  size_t count() const { return labels_.size(); }
  bool jpeg() const { return encoding_ == Encoding::jpeg; }
  bool varied() const { return view_.varied(); }  // each sample its own size (format v2)
  ImageShape shape(size_t i) const { return view_.sample_shape(i); }
  // Raw files: sample i's HWC pixels.
  const uint8_t* pixels(size_t i) const {
    return view_.varied() ? view_.sample(i) : view_.images() + i * sample_bytes_;
  }
  // JPEG files: sample i's bytes.
  const uint8_t* jpeg_data(size_t i) const { return view_.images() + view_.offset(i); }
  size_t jpeg_size(size_t i) const { return size_t(view_.offset(i + 1) - view_.offset(i)); }
  int32_t label(size_t i) const { return labels_[i]; }
  int64_t id(size_t i) const { return ids_[i]; }

 private:
  ByteBuffer bytes_;
  BatchView view_;
  Encoding encoding_ = Encoding::raw;
  std::vector<int32_t> labels_;
  std::vector<int64_t> ids_;
  size_t sample_bytes_ = 0;
};

// For readers that need every sample at one shape (whole files decoded into one array,
// bench-loader's plain decode): a dataset of whole images at their own sizes (batch-file format
// v2, datagen --resize short:S) is refused in one line naming dir's dataset.json.
void require_one_shape(const DatasetMeta& meta, const std::string& dir);

// Reads the batch file at `path` into `buf` and verifies it (verify_batch's checks), refusing a
// file that is not a regular one or not `want` before reading past its header.
BatchView read_verified(const std::string& path, const BatchFileEntry& want, ByteBuffer& buf);

}  // namespace convoy
