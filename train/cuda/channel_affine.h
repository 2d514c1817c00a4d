// A tensor left as x * scale + shift per channel by the node that made it (batch norm), for its
// only consumer to apply as it reads x, so that the tensor never crosses memory on its own; and,
// backward, that node's gradient sums, taken by the consumer as it writes the gradient.
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

// Where a consumer that writes a deferred batch norm's output gradient g also sums, per channel, g
// and g * (x - mean) * invstd (batch norm's GradTerms, in the same order, so the same bits) into
// part ([parts(rows), c] float2, channels.cuh's pack-wise partials): the batch norm's backward
// pass then reads neither g nor x for them.
struct BnGradSums {
  const bf16* x = nullptr;  // the batch norm's input
  const float *mean = nullptr, *invstd = nullptr;
  float2* part = nullptr;  // null: no sums taken
};

#ifdef __CUDACC__
// x * scale + shift: batch norm's own pass and a consumer applying a ChannelAffine both call this
// one expression, so that both compile it alike and store the same bits.
__device__ __forceinline__ float apply_affine(float x, float2 scale_shift) { return x * scale_shift.x + scale_shift.y; }

// Batch norm's second gradient term, g * (x - mean) * invstd: its own sums and a consumer taking
// them (BnGradSums) both call this one expression, for the same reason.
__device__ __forceinline__ float bn_grad_term(float g, float x, float mean, float invstd) {
  return g * (x - mean) * invstd;
}
#endif

}  // namespace convoy::gpu
