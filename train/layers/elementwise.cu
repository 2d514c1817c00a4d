// CUDA twin of elementwise.cpp: ReLU, residual add and gradient accumulation, for fp32 or bf16
// elements (fp32 arithmetic either way; ReLU is exact in both).
#include "train/layers/gpu_ops.h"
#include "train/layers/storage.cuh"

namespace convoy::gpu {
namespace {

template <typename T>
__global__ void relu_fwd(size_t n, const T* __restrict__ x, T* __restrict__ y) {
  CONVOY_GRID_STRIDE(i, n) {
    const float v = load(x[i]);
    y[i] = store<T>(v > 0.f ? v : 0.f);
  }
}
template <typename T>
__global__ void relu_bwd(size_t n, const T* __restrict__ y, const T* __restrict__ dy, T* __restrict__ dx) {
  CONVOY_GRID_STRIDE(i, n) dx[i] = store<T>(load(y[i]) > 0.f ? load(dy[i]) : 0.f);
}
template <typename T>
__global__ void add(size_t n, const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ y) {
  CONVOY_GRID_STRIDE(i, n) y[i] = store<T>(load(a[i]) + load(b[i]));
}
template <typename T>
__global__ void acc(size_t n, const T* __restrict__ src, T* __restrict__ dst) {
  CONVOY_GRID_STRIDE(i, n) dst[i] = store<T>(load(dst[i]) + load(src[i]));
}

}  // namespace

template <typename T>
void relu_forward(Context& ctx, size_t count, const T* x, T* y) {
  relu_fwd<<<grid_for(count), 256, 0, ctx.stream()>>>(count, x, y);
  CONVOY_CUDA_CHECK_LAUNCH();
}
template <typename T>
void relu_backward(Context& ctx, size_t count, const T* y, const T* dy, T* dx) {
  relu_bwd<<<grid_for(count), 256, 0, ctx.stream()>>>(count, y, dy, dx);
  CONVOY_CUDA_CHECK_LAUNCH();
}
template <typename T>
void add_forward(Context& ctx, size_t count, const T* a, const T* b, T* y) {
  add<<<grid_for(count), 256, 0, ctx.stream()>>>(count, a, b, y);
  CONVOY_CUDA_CHECK_LAUNCH();
}
template <typename T>
void accumulate(Context& ctx, size_t count, const T* src, T* dst) {
  acc<<<grid_for(count), 256, 0, ctx.stream()>>>(count, src, dst);
  CONVOY_CUDA_CHECK_LAUNCH();
}

#define CONVOY_ELEMENTWISE_INSTANTIATE(T)                                        \
  template void relu_forward<T>(Context&, size_t, const T*, T*);                 \
  template void relu_backward<T>(Context&, size_t, const T*, const T*, T*);      \
  template void add_forward<T>(Context&, size_t, const T*, const T*, T*);        \
  template void accumulate<T>(Context&, size_t, const T*, T*);
CONVOY_ELEMENTWISE_INSTANTIATE(float)
CONVOY_ELEMENTWISE_INSTANTIATE(bf16)

}  // namespace convoy::gpu
