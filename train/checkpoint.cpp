// Layout: "CVYCKPT1", u64 sizes of the JSON text and of the four float arrays, the JSON, the
// arrays, then a CRC32C of every byte before it (little-endian, as the batch files). "CVYCKPT2" (a
// run with a moving average of its weights) has six arrays, the average's weights and state last.
#include "train/checkpoint.h"

#include <cstring>

#include "shared/atomic_file.h"
#include "shared/crc32c.h"
#include "shared/error.h"

namespace convoy {
namespace {
constexpr char kMagic[8] = {'C', 'V', 'Y', 'C', 'K', 'P', 'T', '1'};
constexpr size_t kMaxArrays = 6;

// The arrays of a checkpoint in file order: four, or six where it holds an average (version 2).
std::vector<std::vector<float>*> arrays_of(Checkpoint& c, bool average) {
  std::vector<std::vector<float>*> a = {&c.weights, &c.state, &c.m, &c.v};
  if (average) a.insert(a.end(), {&c.avg_weights, &c.avg_state});
  return a;
}
}  // namespace

void write_checkpoint(const std::string& path, const Checkpoint& c) {
  const std::string info = c.info.dump();
  const bool average = !c.avg_weights.empty();
  const std::vector<std::vector<float>*> arrays = arrays_of(const_cast<Checkpoint&>(c), average);
  std::string bytes(kMagic, 8);
  if (average) bytes[7] = '2';
  auto put_u64 = [&](uint64_t x) { bytes.append(reinterpret_cast<const char*>(&x), 8); };
  put_u64(info.size());
  for (auto* a : arrays) put_u64(a->size());
  bytes += info;
  for (auto* a : arrays) bytes.append(reinterpret_cast<const char*>(a->data()), a->size() * sizeof(float));
  const uint32_t crc = crc32c(bytes.data(), bytes.size());
  bytes.append(reinterpret_cast<const char*>(&crc), 4);
  write_file_atomic(path, bytes);
}

Checkpoint read_checkpoint(const std::string& path) {
  if (!file_exists(path)) fail_file(path, "checkpoint not found");
  return parse_checkpoint(read_whole_file(path), path);
}

Checkpoint parse_checkpoint(const std::string& bytes, const std::string& path) {
  const bool average = bytes.size() >= 8 && bytes[7] == '2';
  const size_t n = average ? kMaxArrays : 4, head = 8 + (n + 1) * 8;
  if (bytes.size() < head + 4 || std::memcmp(bytes.data(), kMagic, 7) != 0 || (bytes[7] != '1' && !average))
    fail_file(path, "not a convoy checkpoint (bad magic or too short)");
  uint32_t stored;
  std::memcpy(&stored, bytes.data() + bytes.size() - 4, 4);
  if (crc32c(bytes.data(), bytes.size() - 4) != stored)
    fail_file(path, "checkpoint is damaged (CRC32C mismatch); use an earlier one");
  uint64_t sizes[kMaxArrays + 1];
  std::memcpy(sizes, bytes.data() + 8, (n + 1) * 8);
  // Each size is bounded by the file before they are added up, so that no sum or product wraps
  // around to the file size and lets a huge array through to resize and memcpy.
  uint64_t need = head + 4;
  for (size_t i = 0; i <= n; ++i) {
    const uint64_t unit = i == 0 ? 1 : sizeof(float);
    if (sizes[i] > bytes.size() / unit) fail_file(path, "checkpoint sizes do not add up to the file size");
    need += sizes[i] * unit;
  }
  if (need != bytes.size()) fail_file(path, "checkpoint sizes do not add up to the file size");
  Checkpoint c;
  try {
    c.info = nlohmann::json::parse(bytes.substr(head, sizes[0]));
  } catch (const std::exception& e) {
    fail_file(path, std::string("checkpoint metadata: ") + e.what());
  }
  size_t at = head + sizes[0];
  const std::vector<std::vector<float>*> arrays = arrays_of(c, average);
  for (size_t i = 0; i < n; ++i) {
    arrays[i]->resize(sizes[i + 1]);
    // An empty array (a net without batch norm has no state) has no storage to copy into, and
    // memcpy to a null pointer is undefined even for zero bytes.
    if (sizes[i + 1]) std::memcpy(arrays[i]->data(), bytes.data() + at, sizes[i + 1] * sizeof(float));
    at += sizes[i + 1] * sizeof(float);
  }
  return c;
}

}  // namespace convoy
