// How a bf16 CUDA net's input samples lie in device memory (fp32 nets read the CPU's NCHW): NHWC
// padded to whole 16-byte pixels, or folded for the first convolution (InputFold).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "train/input_fold.h"

namespace convoy::gpu {

// fold none: stored pixel (y, x) holds the sample's c channels of pixel (y, x), then zeros up to
// c_stored (cuDNN's NHWC tensor-core kernels want whole 16-byte pixels).
// fold blocks, for a net whose only reader of its input is a stride-2 k x k convolution with
// padding `pad` (ResNet's 7x7/2 stem): stored pixel (i, j) holds, at channel (2 by + bx) c + ch,
// channel ch of sample pixel (2i + by - pad, 2j + bx - pad), zero outside the sample (the
// convolution's padding), then zeros up to c_stored. The convolution is then a ceil(k/2)-square
// stride-1 one without padding over 4c channels, which cuDNN runs several times faster, and the
// input is half as large as 3 channels padded to 8.
// fold patches, for a net whose only reader is a k x k convolution of stride s (2, or 1 where the
// window holds few values: a gray or colour 3x3 first layer): stored pixel (i, j) is the
// convolution's output pixel (i, j) and holds, at channel (ky k + kx) c + ch, channel ch of sample
// pixel (s i + ky - pad, s j + kx - pad) (zero outside), then zeros up to c_stored: the convolution
// is a 1x1 one over k^2 c channels, a plain GEMM, whose filter gradient in particular runs far
// faster than over 16 channels (and over one channel, far faster than cuDNN's 3x3 kernels).
struct InputLayout {
  int c = 0, h = 0, w = 0;  // the net's input sample
  int c_stored = 0, h_stored = 0, w_stored = 0;
  InputFold fold = InputFold::none;
  int k = 0, pad = 0;  // fold blocks and patches: the convolution's kernel size and padding
  int stride = 2;      // fold patches: its stride (blocks: always 2)
  __host__ __device__ size_t sample_size() const { return size_t(c_stored) * h_stored * w_stored; }
};

inline InputLayout plain_input(int c, int h, int w, int c_stored) { return {c, h, w, c_stored, h, w}; }

// For the stride-2 k x k convolution with padding `pad` that reads the input: stored rows reach
// the last one its last output row reads, 2 (h_out - 1) + k - 1 in padded coordinates.
inline InputLayout space_to_depth_input(int c, int h, int w, int k, int pad) {
  const int kb = (k + 1) / 2, h_out = (h + 2 * pad - k) / 2 + 1, w_out = (w + 2 * pad - k) / 2 + 1;
  return {c, h, w, (4 * c + 7) / 8 * 8, h_out - 1 + kb, w_out - 1 + kb, InputFold::blocks, k, pad};
}

inline InputLayout patches_input(int c, int h, int w, int k, int pad, int stride) {
  const int h_out = (h + 2 * pad - k) / stride + 1, w_out = (w + 2 * pad - k) / stride + 1;
  return {c, h, w, (k * k * c + 7) / 8 * 8, h_out, w_out, InputFold::patches, k, pad, stride};
}

// The same layout for samples of h x w ([data] progressive's smaller training crops): the same
// channels stored, the fold's rows and columns those of that size.
inline InputLayout resized_input(const InputLayout& l, int h, int w) {
  switch (l.fold) {
    case InputFold::blocks: return space_to_depth_input(l.c, h, w, l.k, l.pad);
    case InputFold::patches: return patches_input(l.c, h, w, l.k, l.pad, l.stride);
    case InputFold::none: break;
  }
  return plain_input(l.c, h, w, l.c_stored);
}

// Which sample value stored channel t of stored pixel (i, j) holds: its pixel (y, x) and channel ch,
// or false where the stored value is zero.
__host__ __device__ inline bool input_source(const InputLayout& l, int i, int j, int t, int& y, int& x, int& ch) {
  switch (l.fold) {
    case InputFold::none: y = i, x = j, ch = t; return t < l.c;
    case InputFold::blocks: {
      if (t >= 4 * l.c) return false;
      const int b = t / l.c;
      ch = t % l.c;
      y = 2 * i + b / 2 - l.pad;
      x = 2 * j + b % 2 - l.pad;
      break;
    }
    case InputFold::patches: {
      if (t >= l.k * l.k * l.c) return false;
      const int tap = t / l.c;
      ch = t % l.c;
      y = l.stride * i + tap / l.k - l.pad;
      x = l.stride * j + tap % l.k - l.pad;
      break;
    }
  }
  return y >= 0 && y < l.h && x >= 0 && x < l.w;
}

}  // namespace convoy::gpu
