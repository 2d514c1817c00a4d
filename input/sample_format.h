// What a loader's raw batches hold per sample, for a consumer that mirrors and normalises them
// itself (the CUDA backend's step): the output's size and channels, and the normalisation.
#pragma once
#include <cstddef>
#include <vector>

namespace convoy {

struct SampleFormat {
  int channels = 0, height = 0, width = 0;  // uint8 HWC, after the crop and resize
  std::vector<float> scale, shift;          // per channel: 1/std and -mean/std (x * scale + shift)

  size_t bytes() const { return size_t(height) * size_t(width) * size_t(channels); }
};

}  // namespace convoy
