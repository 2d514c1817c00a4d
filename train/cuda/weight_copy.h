// The bf16 copy of the flat fp32 weights that a bf16 net multiplies with: which segments are
// reordered (conv filters to cuDNN's NHWC order) or padded, and its refresh after the weights change.
#pragma once
#include <cstddef>

#include "train/cuda/storage.h"
#include "train/input_fold.h"

namespace convoy::gpu {

class Context;

// A conv's weights in the flat parameter buffer, [c_out, c, kh, kw] there (c = c_in / groups),
// which the bf16 copy holds in cuDNN's NHWC filter order [c_out, kh, kw, c]; rs = kh * kw.
// dest: where the segment starts in the copy (begin, unless it is padded); c_pad: channels per
// filter tap there (c, or more for a padded first convolution, whose extra weights stay zero);
// fold, k: a first convolution over folded input (InputLayout) and its kernel size, see filter_index.
struct WeightSegment {
  size_t begin = 0, end = 0;
  int c = 0, rs = 0;
  size_t dest = 0;
  int c_pad = 0;
  InputFold fold = InputFold::none;
  int k = 0;
};
// The bf16 copy of the flat fp32 weights that a bf16 net computes with: the same offsets, the
// segments (device array, sorted, disjoint) reordered (and padded ones moved past the flat
// weights). An empty copy (w null) is not kept.
struct WeightCopy {
  bf16* w = nullptr;
  const WeightSegment* segments = nullptr;
  int count = 0;
};
// copy = the first n flat weights w, rounded and reordered.
void refresh_weight_copy(Context& ctx, size_t n, const float* w, const WeightCopy& copy);

}  // namespace convoy::gpu
