// The bf16 copy of the flat fp32 weights that a bf16 net computes with, refreshed in full (after
// an upload, or weights changed outside the fused optimiser updates).
#include "train/cuda/gpu_context.h"
#include "train/cuda/weight_copy.cuh"
#include "train/cuda/weight_copy.h"

namespace convoy::gpu {
namespace {

__global__ void refresh(size_t n, const float* __restrict__ w, WeightCopy copy) {
  CONVOY_GRID_STRIDE(i, n) copy.w[copy_index(i, copy.segments, copy.count)] = __float2bfloat16_rn(w[i]);
}

}  // namespace

void refresh_weight_copy(Context& ctx, size_t n, const float* w, const WeightCopy& copy) {
  if (!copy.w || n == 0) return;
  refresh<<<grid_for(n), 256, 0, ctx.stream()>>>(n, w, copy);
  CONVOY_CUDA_CHECK_LAUNCH();
}

}  // namespace convoy::gpu
