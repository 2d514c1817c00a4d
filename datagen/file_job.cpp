// Each slot is written by the one thread that made its sample, so the slots need no lock; the
// counter of samples left tells exactly one thread that the file is complete.
#include "datagen/file_job.h"

#include <cstring>

namespace convoy::datagen {

FileJob::FileJob(uint64_t b, std::vector<uint64_t> ids, std::vector<uint8_t> buffer, const ImageShape& shape,
                 Encoding encoding)
    : b_(b), ids_(std::move(ids)), shape_(shape), encoding_(encoding), left_(ids_.size()) {
  const size_t n = ids_.size();
  if (encoding_ == Encoding::jpeg) {
    encoded_.resize(n);
  } else {
    pixels_ = std::move(buffer);
    pixels_.resize(n * shape_.bytes());
  }
  reason_.resize(n);
}

SlotOut FileJob::slot(size_t i) {
  if (encoding_ == Encoding::jpeg) return {nullptr, &encoded_[i]};
  return {pixels_.data() + i * shape_.bytes(), nullptr};
}

Batch FileJob::assemble(const InputIndex& index, std::vector<std::pair<uint64_t, std::string>>& rejected) {
  const size_t bytes = shape_.bytes();
  const bool jpeg = encoding_ == Encoding::jpeg;
  Batch batch;
  batch.shape = shape_;
  batch.encoding = encoding_;
  batch.batch_index = uint32_t(b_);
  batch.images = std::move(pixels_);
  if (jpeg) batch.images.clear(), batch.offsets.push_back(0);
  for (size_t i = 0; i < ids_.size(); ++i) {
    if (!reason_[i].empty()) {
      rejected.emplace_back(ids_[i], reason_[i]);
      continue;
    }
    if (jpeg) {
      batch.images.insert(batch.images.end(), encoded_[i].begin(), encoded_[i].end());
      batch.offsets.push_back(batch.images.size());
    } else if (batch.count() != i) {
      std::memmove(batch.images.data() + batch.count() * bytes, batch.images.data() + i * bytes, bytes);
    }
    batch.labels.push_back(index.entries[ids_[i]].label);
    batch.ids.push_back(int64_t(ids_[i]));
  }
  if (!jpeg) batch.images.resize(batch.count() * bytes);
  return batch;
}

}  // namespace convoy::datagen
