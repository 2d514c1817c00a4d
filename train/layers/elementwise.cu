// CUDA twin of elementwise.cpp: ReLU, residual add and gradient accumulation.
#include "train/layers/gpu_ops.h"

namespace convoy::gpu {
namespace {

__global__ void relu_fwd(size_t n, const float* __restrict__ x, float* __restrict__ y) {
  CONVOY_GRID_STRIDE(i, n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
__global__ void relu_bwd(size_t n, const float* __restrict__ y, const float* __restrict__ dy, float* __restrict__ dx) {
  CONVOY_GRID_STRIDE(i, n) dx[i] = y[i] > 0.f ? dy[i] : 0.f;
}
__global__ void add(size_t n, const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ y) {
  CONVOY_GRID_STRIDE(i, n) y[i] = a[i] + b[i];
}
__global__ void acc(size_t n, const float* __restrict__ src, float* __restrict__ dst) {
  CONVOY_GRID_STRIDE(i, n) dst[i] += src[i];
}

}  // namespace

void relu_forward(Context& ctx, size_t count, const float* x, float* y) {
  relu_fwd<<<grid_for(count), 256, 0, ctx.stream()>>>(count, x, y);
  CONVOY_CUDA_CHECK_LAUNCH();
}
void relu_backward(Context& ctx, size_t count, const float* y, const float* dy, float* dx) {
  relu_bwd<<<grid_for(count), 256, 0, ctx.stream()>>>(count, y, dy, dx);
  CONVOY_CUDA_CHECK_LAUNCH();
}
void add_forward(Context& ctx, size_t count, const float* a, const float* b, float* y) {
  add<<<grid_for(count), 256, 0, ctx.stream()>>>(count, a, b, y);
  CONVOY_CUDA_CHECK_LAUNCH();
}
void accumulate(Context& ctx, size_t count, const float* src, float* dst) {
  acc<<<grid_for(count), 256, 0, ctx.stream()>>>(count, src, dst);
  CONVOY_CUDA_CHECK_LAUNCH();
}

}  // namespace convoy::gpu
