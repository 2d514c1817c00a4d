// A tensor left as x * scale + shift per channel by the node that made it (batch norm), for its
// only consumer to apply as it reads x, so that the tensor never crosses memory on its own.
#pragma once
#include <vector_types.h>

#include "train/cuda/storage.h"

namespace convoy::gpu {

// Applied as the making node's own pass would store it, rounded to bf16, so the consumer's result
// is the same bit for bit. Without scale_shift, x is the tensor as it is.
struct ChannelAffine {
  const bf16* x = nullptr;
  const float2* scale_shift = nullptr;  // per channel
  bool relu = false;                    // then max(0, .), as the making node's fused ReLU
};

#ifdef __CUDACC__
// x * scale + shift: batch norm's own pass and a consumer applying a ChannelAffine both call this
// one expression, so that both compile it alike and store the same bits.
__device__ __forceinline__ float apply_affine(float x, float2 scale_shift) { return x * scale_shift.x + scale_shift.y; }
#endif

}  // namespace convoy::gpu
