// Epoch plans with a portable Fisher-Yates shuffle driven by the counter hash, so the order is
// the same on every platform and standard library.
#include "input/epoch_plan.h"

#include <algorithm>
#include <numeric>

#include "shared/counter_rng.h"

namespace convoy {
namespace {
template <class T>
void shuffle(std::vector<T>& v, uint64_t key, uint64_t salt) {
  for (size_t i = v.size(); i > 1; --i) {
    size_t j = size_t(double(counter_uniform(key, salt, i)) * double(i));
    if (j >= i) j = i - 1;
    std::swap(v[i - 1], v[j]);
  }
}
uint64_t epoch_key(const PlanOptions& o) { return order_epoch_key(o.seed, o.epoch); }
}  // namespace

std::vector<uint32_t> rank_files(const DatasetMeta& meta, const PlanOptions& o) {
  std::vector<uint32_t> all(meta.files.size());
  std::iota(all.begin(), all.end(), 0u);
  if (o.shuffle) shuffle(all, epoch_key(o), 0xF11E5);
  std::vector<uint32_t> mine;
  for (size_t i = size_t(o.rank); i < all.size(); i += size_t(o.ranks)) mine.push_back(all[i]);
  return mine;
}

std::vector<SampleRef> rank_stream(const DatasetMeta& meta, const PlanOptions& o) {
  const std::vector<uint32_t> files = rank_files(meta, o);
  const size_t w = size_t(std::max(1, o.window_files));
  std::vector<SampleRef> out;
  for (size_t start = 0; start < files.size(); start += w) {
    std::vector<SampleRef> window;
    for (size_t f = start; f < std::min(files.size(), start + w); ++f)
      for (uint32_t i = 0; i < meta.files[files[f]].count; ++i) window.push_back({files[f], i});
    // Keyed by the window's first file, not its position, so the same files shuffle the same way
    // whichever rank reads them.
    if (o.shuffle) shuffle(window, epoch_key(o), 0x5A3B1E00000000ull + files[start]);
    out.insert(out.end(), window.begin(), window.end());
  }
  return out;
}

long long samples_every_rank_gets(const DatasetMeta& meta, int ranks) {
  std::vector<uint32_t> counts;
  for (const auto& f : meta.files) counts.push_back(f.count);
  std::sort(counts.begin(), counts.end());
  const size_t share = counts.size() / size_t(std::max(1, ranks));
  long long samples = 0;
  for (size_t i = 0; i < share; ++i) samples += counts[i];
  return samples;
}

long long steps_per_epoch(const DatasetMeta& meta, PlanOptions o, int local_batch) {
  // The smallest share any rank can be dealt in any epoch, fixed for the whole run, so the lr
  // schedule's length is known up front.
  return samples_every_rank_gets(meta, o.ranks) / std::max(1, local_batch);
}

long long steps_per_epoch(const DatasetMeta& meta, int ranks, int local_batch) {
  return samples_every_rank_gets(meta, ranks) / std::max(1, local_batch);
}

}  // namespace convoy
