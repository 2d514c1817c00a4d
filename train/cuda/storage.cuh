// Device-side loads and stores of the two activation element types: arithmetic is always fp32, and
// a bf16 store rounds to nearest (ties to even), as PyTorch's autocast does. Memory-bound kernels
// move Packs of 16 bytes per access (4 floats, 8 bf16), which keeps enough bytes in flight to
// approach the memory bandwidth that one 2-byte access per thread cannot.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

namespace convoy::gpu {

__device__ __forceinline__ float load(float v) { return v; }
__device__ __forceinline__ float load(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T store(float v);
template <>
__device__ __forceinline__ float store<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 store<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// Elements per 16-byte pack.
template <typename T>
constexpr int kPack = int(16 / sizeof(T));

// A fused ReLU's output as its backward passes read it: one bit per element of a pack (bit j set:
// element j > 0), a byte for a 16-byte pack of bf16 instead of the pack itself.
template <typename T, int V>
__device__ __forceinline__ unsigned positive_bits(const Pack<T, V>& p) {
  unsigned b = 0;
#pragma unroll
  for (int j = 0; j < V; ++j) b |= (load(p.v[j]) > 0.f ? 1u : 0u) << j;
  return b;
}

// The signs of pack k of a fused ReLU's output y: from its bits where they are kept, else from y.
template <typename T, int V>
__device__ __forceinline__ unsigned relu_signs(const uint8_t* bits, const T* y, size_t k) {
  return bits ? bits[k] : positive_bits(reinterpret_cast<const Pack<T, V>*>(y)[k]);
}

// Whether every pointer may be read or written in packs of V elements of T.
template <typename T, int V, typename... P>
bool pack_aligned(const P*... p) {
  return ((reinterpret_cast<uintptr_t>(p) % (sizeof(T) * V) == 0) && ...);
}

}  // namespace convoy::gpu
