// Each thread adds to its own sums; the integer totals make the order in which samples and
// threads are added irrelevant.
#include "datagen/thread_stats.h"

#include <omp.h>

namespace convoy::datagen {

ThreadStats::ThreadStats(const InputIndex& index, const ImageShape& shape, int threads)
    : index_(index), shape_(shape), sums_(size_t(threads)) {}

SampleSums& ThreadStats::mine() {
  auto& s = sums_[size_t(omp_get_thread_num())];
  if (!s) s = std::make_unique<SampleSums>(index_.classes.size(), shape_);
  return *s;
}

void ThreadStats::add(uint64_t id, const uint8_t* pixels, size_t bytes) {
  if (shape_.height == 0)
    mine().add_varied(pixels, bytes, index_.entries[id].label);
  else
    mine().add(pixels, index_.entries[id].label);
}

void ThreadStats::add(const DatasetSums& sums) { mine().add(sums); }

void ThreadStats::add_to(DatasetSums& total) {
  for (auto& s : sums_)
    if (s) total.merge(s->totals());
}

}  // namespace convoy::datagen
