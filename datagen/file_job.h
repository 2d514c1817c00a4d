// A batch file being made: its planned samples, a slot for each one's result (or the reason it
// was rejected), how many are left, and the Batch they become, in slot order, for the writer.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "datagen/index.h"
#include "shared/batch_file.h"

namespace convoy::datagen {

// Where one slot's sample goes: its raw pixels, or (JPEG output) its encoded bytes.
struct SlotOut {
  uint8_t* raw = nullptr;
  std::vector<uint8_t>* encoded = nullptr;
};

class FileJob {
 public:
  // Batch file b, planned to hold the samples `ids` (in slot order), its raw samples made in
  // `buffer` (memory a written file no longer needs, of any size and contents).
  FileJob(uint64_t b, std::vector<uint64_t> ids, std::vector<uint8_t> buffer, const ImageShape& shape,
          Encoding encoding);

  uint64_t b() const { return b_; }
  size_t samples() const { return ids_.size(); }
  uint64_t id(size_t slot) const { return ids_[slot]; }
  SlotOut slot(size_t i);
  // Slot i's sample is rejected, for this reason.
  void reject(size_t i, std::string why) { reason_[i] = std::move(why); }
  // One more sample is done, made or rejected (any thread); true for the file's last.
  bool sample_done() { return left_.fetch_sub(1) == 1; }

  // Once every sample is done: the made samples in slot order, compacted in place (a rejected
  // sample leaves no gap), their labels from `index`; the rejected ones go to `rejected`.
  Batch assemble(const InputIndex& index, std::vector<std::pair<uint64_t, std::string>>& rejected);

 private:
  const uint64_t b_;
  const std::vector<uint64_t> ids_;
  const ImageShape shape_;
  const Encoding encoding_;
  std::vector<uint8_t> pixels_;                // raw: slot i at i * shape bytes
  std::vector<std::vector<uint8_t>> encoded_;  // JPEG: slot i's bytes
  std::vector<std::string> reason_;            // "" or why slot i's sample is rejected
  std::atomic<size_t> left_;                   // samples not yet done
};

}  // namespace convoy::datagen
