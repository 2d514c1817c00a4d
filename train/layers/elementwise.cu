// CUDA twin of elementwise.cpp: ReLU, residual add and gradient accumulation, for fp32 or bf16
// elements (fp32 arithmetic either way; ReLU is exact in both), in 16-byte packs where the
// pointers allow.
#include "train/layers/gpu_ops.h"
#include "train/layers/storage.cuh"

namespace convoy::gpu {
namespace {

struct Relu {
  __device__ float operator()(float x, float) const { return x > 0.f ? x : 0.f; }
};
struct ReluGrad {  // (y, dy)
  __device__ float operator()(float y, float dy) const { return y > 0.f ? dy : 0.f; }
};
struct Sum {
  __device__ float operator()(float a, float b) const { return a + b; }
};

// y = f(a, b) elementwise (a unary f gets b = a, read once), V elements per access, the last n % V
// one by one. y may be a (accumulation in place).
template <typename T, int V, typename F>
__global__ void map(size_t n, F f, const T* a, const T* b, T* y) {
  using P = Pack<T, V>;
  const size_t packs = n / V;
  CONVOY_GRID_STRIDE(k, packs) {
    const P pa = reinterpret_cast<const P*>(a)[k];
    const P pb = b == a ? pa : reinterpret_cast<const P*>(b)[k];
    P r;
#pragma unroll
    for (int j = 0; j < V; ++j) r.v[j] = store<T>(f(load(pa.v[j]), load(pb.v[j])));
    reinterpret_cast<P*>(y)[k] = r;
  }
  const size_t t = packs * V + blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (t < n) y[t] = store<T>(f(load(a[t]), load(b[t])));
}

template <typename T, typename F>
void launch(Context& ctx, size_t n, F f, const T* a, const T* b, T* y) {
  constexpr int V = kPack<T>;
  if (pack_aligned<T, V>(a, b, y))
    map<T, V><<<grid_for(n / V), 256, 0, ctx.stream()>>>(n, f, a, b, y);
  else
    map<T, 1><<<grid_for(n), 256, 0, ctx.stream()>>>(n, f, a, b, y);
  CONVOY_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <typename T>
void relu_forward(Context& ctx, size_t count, const T* x, T* y) {
  launch(ctx, count, Relu{}, x, x, y);
}
template <typename T>
void relu_backward(Context& ctx, size_t count, const T* y, const T* dy, T* dx) {
  launch(ctx, count, ReluGrad{}, y, dy, dx);
}
template <typename T>
void add_forward(Context& ctx, size_t count, const T* a, const T* b, T* y) {
  launch(ctx, count, Sum{}, a, b, y);
}
template <typename T>
void accumulate(Context& ctx, size_t count, const T* src, T* dst) {
  launch(ctx, count, Sum{}, const_cast<const T*>(dst), src, dst);
}

#define CONVOY_ELEMENTWISE_INSTANTIATE(T)                                        \
  template void relu_forward<T>(Context&, size_t, const T*, T*);                 \
  template void relu_backward<T>(Context&, size_t, const T*, const T*, T*);      \
  template void add_forward<T>(Context&, size_t, const T*, const T*, T*);        \
  template void accumulate<T>(Context&, size_t, const T*, T*);
CONVOY_ELEMENTWISE_INSTANTIATE(float)
CONVOY_ELEMENTWISE_INSTANTIATE(bf16)

}  // namespace convoy::gpu
