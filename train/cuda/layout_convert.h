// The seams of a bf16 net: its NHWC activations reordered to the CPU's NCHW flatten order and back,
// and fp32 values rounded to bf16 where the logits' gradient enters bf16 matrix products.
#pragma once
#include <cstddef>

#include "train/cuda/storage.h"

namespace convoy::gpu {

class Context;

// Per sample, [hw, c] (NHWC) to [c, hw] (NCHW) and back. The CPU flattens in NCHW order, so a bf16
// net reorders where a spatial tensor meets a flatten or fc, and fc weights keep the CPU's layout.
template <typename T>
void nhwc_to_nchw(Context& ctx, int n, int c, int hw, const T* x, T* y);
template <typename T>
void nchw_to_nhwc(Context& ctx, int n, int c, int hw, const T* x, T* y);
// y = x rounded to bf16 (to nearest, ties to even).
void round_to_bf16(Context& ctx, size_t count, const float* x, bf16* y);

}  // namespace convoy::gpu
