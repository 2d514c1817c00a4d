// One kernel body for elementwise ops over flat buffers, y = f(a, b) in fp32 arithmetic on float or
// bf16 elements, moved in 16-byte packs where the pointers allow; an op supplies only f.
#pragma once
#include <cstddef>

#include "train/cuda/gpu_context.h"
#include "train/cuda/storage.cuh"

namespace convoy::gpu::elementwise {

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

}  // namespace convoy::gpu::elementwise
