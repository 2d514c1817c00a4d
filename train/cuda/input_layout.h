// How a bf16 CUDA net's input samples lie in device memory (fp32 nets read the CPU's NCHW): NHWC
// padded to whole 16-byte pixels, or 2x2 pixel blocks folded into the channels (space to depth).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

namespace convoy::gpu {

// block 1: stored pixel (y, x) holds the sample's c channels of pixel (y, x), then zeros up to
// c_stored (cuDNN's NHWC tensor-core kernels want whole 16-byte pixels).
// block 2, for a net whose only reader of its input is a stride-2 convolution (ResNet's 7x7/2 stem):
// stored pixel (i, j) holds, at channel (2 by + bx) c + ch, channel ch of sample pixel
// (2i + by - pad, 2j + bx - pad), zero outside the sample (the convolution's padding), then zeros
// up to c_stored. The k x k stride-2 convolution with padding `pad` is then a ceil(k/2)-square
// stride-1 one without padding over 4c channels, which cuDNN runs several times faster, and the
// input is half as large as 3 channels padded to 8.
struct InputLayout {
  int c = 0, h = 0, w = 0;  // the net's input sample
  int c_stored = 0, h_stored = 0, w_stored = 0;
  int block = 1, pad = 0;
  __host__ __device__ size_t sample_size() const { return size_t(c_stored) * h_stored * w_stored; }
};

inline InputLayout plain_input(int c, int h, int w, int c_stored) { return {c, h, w, c_stored, h, w, 1, 0}; }

// For the stride-2 k x k convolution with padding `pad` that reads the input: stored rows reach
// the last one its last output row reads, 2 (h_out - 1) + k - 1 in padded coordinates.
inline InputLayout space_to_depth_input(int c, int h, int w, int k, int pad) {
  const int kb = (k + 1) / 2, h_out = (h + 2 * pad - k) / 2 + 1, w_out = (w + 2 * pad - k) / 2 + 1;
  return {c, h, w, (4 * c + 7) / 8 * 8, h_out - 1 + kb, w_out - 1 + kb, 2, pad};
}

// Which sample value stored channel k of stored pixel (i, j) holds: its pixel (y, x) and channel ch,
// or false where the stored value is zero.
__host__ __device__ inline bool input_source(const InputLayout& l, int i, int j, int k, int& y, int& x, int& ch) {
  if (l.block == 1) {
    y = i, x = j, ch = k;
    return k < l.c;
  }
  if (k >= 4 * l.c) return false;
  const int b = k / l.c;
  ch = k % l.c;
  y = 2 * i + b / 2 - l.pad;
  x = 2 * j + b % 2 - l.pad;
  return y >= 0 && y < l.h && x >= 0 && x < l.w;
}

}  // namespace convoy::gpu
