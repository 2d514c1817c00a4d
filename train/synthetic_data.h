// Small synthetic datasets in datagen's output format (batch files + dataset.json), for tests,
// smoke runs and benchmarks without real data: each class draws a bright block at its own
// place over noise, so a net can learn them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "shared/batch_file.h"

namespace convoy {

struct SyntheticSpec {
  std::vector<uint32_t> file_counts;  // samples in each batch file
  ImageShape shape{8, 8, 1};
  int classes = 4;
  Encoding encoding = Encoding::raw;
  uint64_t seed = 1;
};

// Writes <dir>/batch-NNNNN.cvb and <dir>/dataset.json (made_by names the generator).
void write_synthetic_dataset(const std::string& dir, const SyntheticSpec& spec);

}  // namespace convoy
