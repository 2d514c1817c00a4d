// Each slot is written by the one thread that made its sample, so the slots need no lock; the
// counter of samples left tells exactly one thread that the file is complete. Parts: the planned
// layout holds until a sample is rejected (fewer samples move the images), so only then are the
// stretches of done samples final; a file with a rejected sample is written whole at its end.
#include "datagen/file_job.h"

#include <algorithm>
#include <cstring>

namespace convoy::datagen {
namespace {

// A part goes to the writer once about this much of the file is done: large enough for the
// disk's own pace, small enough that the disk starts early and a file's end leaves little.
constexpr uint64_t kPartBytes = uint64_t(8) << 20;

uint64_t align_down(uint64_t x) { return x / AtomicFile::kDirectAlign * AtomicFile::kDirectAlign; }

}  // namespace

FileJob::FileJob(uint64_t b, std::vector<uint64_t> ids, FileBuffer buffer, const ImageShape& shape, Encoding encoding,
                 BatchWriter* writer, const Crc32cAppend* append)
    : b_(b), ids_(std::move(ids)), shape_(shape), encoding_(encoding), writer_(writer), append_(append),
      bytes_(std::move(buffer)), left_(ids_.size()) {
  const size_t n = ids_.size();
  reason_.resize(n);
  if (encoding_ == Encoding::jpeg || shape_.height == 0) {
    encoded_.resize(n);
    if (shape_.height == 0) dims_.resize(2 * n);
    return;
  }
  planned_ = batch_layout(shape_, Encoding::raw, uint32_t(b_), n, n * shape_.bytes());
  bytes_.reserve(planned_.file_bytes);
  crc_.resize(n);
  if (!writer_ || n == 0) return;
  per_block_ = std::max<size_t>(1, size_t(kPartBytes / std::max<size_t>(1, shape_.bytes())));
  const size_t blocks = (n + per_block_ - 1) / per_block_;
  block_left_ = std::make_unique<std::atomic<uint32_t>[]>(blocks);
  for (size_t k = 0; k < blocks; ++k) block_left_[k] = uint32_t(std::min(per_block_, n - k * per_block_));
  block_finished_.assign(blocks, 0);
  parts_from_ = parts_to_ = direct_aligned(planned_.images_offset);
}

SlotOut FileJob::slot(size_t i) {
  if (!dims_.empty()) return {nullptr, nullptr, &encoded_[i], &dims_[2 * i], nullptr};
  if (encoding_ == Encoding::jpeg) return {nullptr, nullptr, &encoded_[i]};
  return {bytes_.data() + planned_.images_offset + i * shape_.bytes(), &crc_[i], nullptr};
}

void FileJob::reject(size_t i, std::string why) {
  reason_[i] = std::move(why);
  rejected_.store(true);
}

bool FileJob::sample_done(size_t i) {
  if (block_left_ && reason_[i].empty() && block_left_[i / per_block_].fetch_sub(1) == 1) block_done(i / per_block_);
  return left_.fetch_sub(1) == 1;
}

void FileJob::block_done(size_t k) {
  std::lock_guard<std::mutex> lock(parts_mu_);
  block_finished_[k] = 1;
  while (frontier_ < block_finished_.size() && block_finished_[frontier_]) ++frontier_;
  if (rejected_.load()) return;
  const size_t done = std::min(frontier_ * per_block_, ids_.size());
  const uint64_t end = align_down(planned_.images_offset + done * shape_.bytes());
  if (end <= parts_to_) return;
  writer_->write_part(b_, bytes_.data(), parts_to_, end - parts_to_);
  parts_to_ = end;
}

MadeFile FileJob::assemble(const InputIndex& index, std::vector<std::pair<uint64_t, std::string>>& rejected) {
  std::vector<int32_t> labels;
  std::vector<int64_t> ids;
  for (size_t i = 0; i < ids_.size(); ++i) {
    if (!reason_[i].empty()) {
      rejected.emplace_back(ids_[i], reason_[i]);
      continue;
    }
    labels.push_back(index.entries[ids_[i]].label);
    ids.push_back(int64_t(ids_[i]));
  }
  return encoding_ == Encoding::jpeg || !dims_.empty() ? assemble_indexed(labels, ids) : assemble_raw(labels, ids);
}

// Without rejects the samples already lie where the file wants them; with some, each later one
// moves down (the images start earlier, as fewer labels and ids precede them).
MadeFile FileJob::assemble_raw(std::vector<int32_t>& labels, std::vector<int64_t>& ids) {
  const size_t bytes = shape_.bytes();
  const bool moved = rejected_.load();
  MadeFile f;
  f.b = b_;
  f.header = moved ? batch_layout(shape_, Encoding::raw, uint32_t(b_), labels.size(), labels.size() * bytes) : planned_;
  uint32_t crc = 0;  // crc32c of nothing
  for (size_t i = 0, k = 0; i < ids_.size(); ++i) {
    if (!reason_[i].empty()) continue;
    if (moved)
      std::memmove(bytes_.data() + f.header.images_offset + k * bytes,
                   bytes_.data() + planned_.images_offset + i * bytes, bytes);
    crc = (*append_)(crc, crc_[i]);
    ++k;
  }
  seal_batch_in_place(bytes_.data(), f.header, labels.data(), ids.data(), nullptr, &crc);
  if (!moved) f.parts_from = parts_from_, f.parts_to = parts_to_;
  f.bytes = std::move(bytes_);
  return f;
}

MadeFile FileJob::assemble_indexed(std::vector<int32_t>& labels, std::vector<int64_t>& ids) {
  const bool varied = !dims_.empty();
  std::vector<uint64_t> offsets{0};
  std::vector<uint32_t> dims;
  for (size_t i = 0; i < ids_.size(); ++i) {
    if (!reason_[i].empty()) continue;
    offsets.push_back(offsets.back() + encoded_[i].size());
    if (varied) dims.insert(dims.end(), {dims_[2 * i], dims_[2 * i + 1]});
  }
  MadeFile f;
  f.b = b_;
  f.header = batch_layout(shape_, encoding_, uint32_t(b_), labels.size(), offsets.back(),
                          varied ? kBatchVersion2 : kBatchVersion);
  bytes_.reserve(f.header.file_bytes);
  uint8_t* at = bytes_.data() + f.header.images_offset;
  for (size_t i = 0; i < ids_.size(); ++i) {
    if (!reason_[i].empty()) continue;
    if (!encoded_[i].empty()) std::memcpy(at, encoded_[i].data(), encoded_[i].size());
    at += encoded_[i].size();
  }
  seal_batch_in_place(bytes_.data(), f.header, labels.data(), ids.data(), offsets.data(), nullptr,
                      varied ? dims.data() : nullptr);
  f.bytes = std::move(bytes_);
  return f;
}

}  // namespace convoy::datagen
