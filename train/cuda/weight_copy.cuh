// Where the bf16 weight copy of a bf16 net keeps each flat weight (WeightCopy in weight_copy.h): conv
// weights move from the CPU's [c_out, c, kh, kw] to cuDNN's NHWC filter order [c_out, kh, kw, c],
// every other weight keeps its index. Shared by the copy's refresh, the fused optimiser updates
// and the conv weight gradient's way back.
#pragma once
#include <cstddef>

#include "train/cuda/weight_copy.h"

namespace convoy::gpu {

// Index in [c_out, kh * kw, c_pad] order of the weight at j in [c_out, c, kh * kw] order (rs = kh *
// kw, c_pad >= c channels per tap in the destination).
__host__ __device__ inline unsigned krsc_index(unsigned j, unsigned c, unsigned rs, unsigned c_pad) {
  const unsigned crs = c * rs, rem = j % crs;
  return j / crs * (rs * c_pad) + (rem % rs) * c_pad + rem / rs;
}

// Index in the filter a convolution stores of the weight at j in [c_out, c, kh * kw] order: with
// fold none, krsc_index; for a first convolution of kernel size k over folded input (InputLayout),
// tap (ky, kx) of channel ch lies, blocks, at tap (ky / 2, kx / 2) of [c_out, ceil(k/2),
// ceil(k/2), c_pad], channel (2 (ky % 2) + kx % 2) c + ch (the taps past k, k odd, stay zero);
// patches, at channel (ky k + kx) c + ch of [c_out, c_pad].
__host__ __device__ inline unsigned filter_index(unsigned j, unsigned c, unsigned rs, unsigned c_pad, InputFold fold,
                                                 unsigned k) {
  if (fold == InputFold::none) return krsc_index(j, c, rs, c_pad);
  const unsigned crs = c * rs, rem = j % crs, t = rem % rs;
  if (fold == InputFold::patches) return j / crs * c_pad + t * c + rem / rs;
  const unsigned ky = t / k, kx = t % k, kb = (k + 1) / 2;
  return ((j / crs * kb + ky / 2) * kb + kx / 2) * c_pad + ((ky % 2) * 2 + kx % 2) * c + rem / rs;
}

// Where flat weight i lies in the copy, given its sorted reordered segments.
__device__ inline size_t copy_index(size_t i, const WeightSegment* __restrict__ segments, int count) {
  int lo = 0, hi = count;  // the first segment ending after i
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (segments[mid].end <= i)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo < count && segments[lo].begin <= i) {
    const WeightSegment s = segments[lo];
    return s.dest +
           filter_index(unsigned(i - s.begin), unsigned(s.c), unsigned(s.rs), unsigned(s.c_pad), s.fold, unsigned(s.k));
  }
  return i;
}

}  // namespace convoy::gpu
