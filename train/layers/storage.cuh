// Device-side loads and stores of the two activation element types: arithmetic is always fp32, and
// a bf16 store rounds to nearest (ties to even), as PyTorch's autocast does.
#pragma once
#include <cuda_bf16.h>

namespace convoy::gpu {

__device__ __forceinline__ float load(float v) { return v; }
__device__ __forceinline__ float load(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T store(float v);
template <>
__device__ __forceinline__ float store<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 store<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

}  // namespace convoy::gpu
