// The dataset statistics of the samples a rank makes or keeps, one SampleSums per OpenMP thread
// so that adding a sample takes no lock; JPEG samples are decoded as a loader will decode them.
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

  // Sample `id`'s finished bytes (raw pixels, or JPEG bytes) into the calling OpenMP thread's sums.
  void add(uint64_t id, const uint8_t* raw, const std::vector<uint8_t>* jpeg);
  // Every sample of a batch file (one kept from an earlier run).
  void add(const Batch& batch);
  // Every thread's sums added to `total`.
  void add_to(DatasetSums& total);

 private:
  SampleSums& mine();  // made on first use

  const InputIndex& index_;
  const ImageShape shape_;
  std::vector<std::unique_ptr<SampleSums>> sums_;  // per OpenMP thread
};

}  // namespace convoy::datagen
