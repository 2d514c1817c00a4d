// A batch file being made: its planned samples, a slot for each one's result (or the reason it
// was rejected), how many are left, and the file they become, laid out in place for the writer.
// Raw samples are made straight into their places in the file's bytes, and the stretches of the
// file whose samples are all done go to the writer as they complete.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "datagen/batch_writer.h"
#include "datagen/index.h"
#include "shared/batch_file.h"
#include "shared/crc32c.h"

namespace convoy::datagen {

// Where one slot's sample goes: its raw pixels and their checksum, or (JPEG output) its encoded
// bytes; where sizes vary (--resize short), its bytes, raw or JPEG, and its height and width.
struct SlotOut {
  // Where the resized pixels go: raw output's place in the file; for JPEG output (nullptr from
  // FileJob) the making thread's own buffer, which they are encoded from and counted in the
  // statistics from.
  uint8_t* raw = nullptr;
  uint32_t* crc = nullptr;                  // raw: crc32c of the pixels, taken by whoever made them
  std::vector<uint8_t>* encoded = nullptr;  // JPEG, and every sample where sizes vary
  // Sizes vary: the sample's height and width go to dims[0], dims[1], and its resized pixels to
  // the making thread's own buffer `pixels` (grown to fit), which the statistics are taken from.
  uint32_t* dims = nullptr;
  std::vector<uint8_t>* pixels = nullptr;
};

class FileJob {
 public:
  // Batch file b, planned to hold the samples `ids` (in slot order), made in `buffer` (memory a
  // written file no longer needs, of any size and contents). writer: where its finished parts go
  // while it is made (nullptr: only the whole file, at the end). append: crc32c.h's joining of
  // raw samples' checksums, for samples of shape.bytes().
  FileJob(uint64_t b, std::vector<uint64_t> ids, FileBuffer buffer, const ImageShape& shape, Encoding encoding,
          BatchWriter* writer, const Crc32cAppend* append);

  uint64_t b() const { return b_; }
  size_t samples() const { return ids_.size(); }
  uint64_t id(size_t slot) const { return ids_[slot]; }
  SlotOut slot(size_t i);
  // Slot i's sample is rejected, for this reason.
  void reject(size_t i, std::string why);
  // Slot i's sample is done, made or rejected (any thread): a stretch of the file it completes
  // goes to the writer. Returns true for the file's last sample.
  bool sample_done(size_t i);

  // Once every sample is done: the made samples in slot order, compacted in place (a rejected
  // sample leaves no gap), their labels from `index`, sealed; the rejected ones go to `rejected`.
  MadeFile assemble(const InputIndex& index, std::vector<std::pair<uint64_t, std::string>>& rejected);

 private:
  // Block k of slots is done: the file's bytes up to the first block not yet done go to the writer.
  void block_done(size_t k);
  MadeFile assemble_raw(std::vector<int32_t>& labels, std::vector<int64_t>& ids);
  // JPEG, and every file where sizes vary: the slots' bytes back to back behind an offset index.
  MadeFile assemble_indexed(std::vector<int32_t>& labels, std::vector<int64_t>& ids);

  const uint64_t b_;
  const std::vector<uint64_t> ids_;
  const ImageShape shape_;
  const Encoding encoding_;
  BatchWriter* const writer_;
  const Crc32cAppend* const append_;
  FileBuffer bytes_;                           // raw: the file as planned, slot i's pixels in place
  BatchHeader planned_{};                      // raw: the layout if no sample is rejected
  std::vector<uint32_t> crc_;                  // raw: slot i's checksum
  std::vector<std::vector<uint8_t>> encoded_;  // JPEG or varied sizes: slot i's bytes
  std::vector<uint32_t> dims_;                 // varied sizes: slot i's height and width at 2i
  std::vector<std::string> reason_;            // "" or why slot i's sample is rejected
  std::atomic<size_t> left_;                   // samples not yet done
  // Parts (raw): blocks of slots; a block's counter reaches 0 when its samples are all made.
  size_t per_block_ = 0;
  std::unique_ptr<std::atomic<uint32_t>[]> block_left_;
  std::atomic<bool> rejected_{false};  // the planned layout no longer holds
  std::mutex parts_mu_;
  std::vector<char> block_finished_;
  size_t frontier_ = 0;                     // blocks [0, frontier_) are all done
  uint64_t parts_from_ = 0, parts_to_ = 0;  // the file's bytes handed to the writer as parts
};

}  // namespace convoy::datagen
