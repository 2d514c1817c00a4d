// The CUDA twin of Augmenter::normalize (input/augment.h): a batch of the loader's uint8 samples,
// mirrored and normalised on the GPU into the element type and layout the net reads.
#pragma once
#include <cstdint>

#include "train/cuda/input_layout.h"
#include "train/cuda/storage.h"

namespace convoy::gpu {

class Context;

// Over a batch: the loader's uint8 HWC samples, each mirrored where flips[i] is set, to normalised
// samples in `layout` (NCHW as the CPU writes them, or NHWC); scale_shift holds the per-channel
// 1/std then -mean/std. A bf16 output is the CPU's float value rounded.
struct InputShape {
  int n = 0, c = 0, h = 0, w = 0;  // the loader's augmented uint8 HWC samples
  InputLayout packed{};            // NHWC: how the output is stored (c_stored 0: c channels per pixel, as is)
};
template <typename T>
void normalize_input(Context& ctx, const InputShape& s, const uint8_t* hwc, const uint8_t* flips,
                     const float* scale_shift, T* out, Layout layout = Layout::nchw);

}  // namespace convoy::gpu
