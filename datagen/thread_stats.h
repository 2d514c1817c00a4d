// The dataset statistics of the samples a rank makes or keeps, one SampleSums per OpenMP thread
// so that adding a sample takes no lock; each sample counts as its resized pixels, before any
// JPEG encoding, which its making thread holds anyway (docs/DATAGEN.md says why).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "datagen/index.h"
#include "datagen/stats.h"
#include "shared/batch_file.h"

namespace convoy::datagen {

class ThreadStats {
 public:
  ThreadStats(const InputIndex& index, const ImageShape& shape, int threads);

  // Sample `id`'s resized pixels (HWC: the shape's bytes, or `bytes` of them where sizes vary)
  // into the calling OpenMP thread's sums.
  void add(uint64_t id, const uint8_t* pixels, size_t bytes);
  // The sums of a batch file's samples (one kept from an earlier run).
  void add(const DatasetSums& sums);
  // Every thread's sums added to `total`.
  void add_to(DatasetSums& total);

 private:
  SampleSums& mine();  // made on first use

  const InputIndex& index_;
  const ImageShape shape_;
  std::vector<std::unique_ptr<SampleSums>> sums_;  // per OpenMP thread
};

}  // namespace convoy::datagen
