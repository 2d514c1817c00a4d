// CUDA twin of dropout.cpp: the same counter-based mask (splitmix64 of key, sample key and element
// index), so CPU and GPU drop the same elements.
#include "train/layers/gpu_ops.h"

namespace convoy::gpu {
namespace {

__device__ inline uint64_t mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

__global__ void drop_fwd(DropoutShape s, size_t total, float keep, const uint64_t* __restrict__ step_key, uint64_t salt,
                         const uint64_t* __restrict__ sample_keys, const float* __restrict__ x, float* __restrict__ y,
                         float* __restrict__ mask) {
  const uint64_t key = *step_key ^ salt;
  CONVOY_GRID_STRIDE(k, total) {
    const size_t n = k / s.per_sample, i = k % s.per_sample;
    const uint64_t h = mix(mix(mix(key) ^ sample_keys[n]) ^ i);
    const float u = float(h >> 40) * (1.0f / 16777216.0f);
    mask[k] = u < s.p ? 0.f : keep;
    y[k] = x[k] * mask[k];
  }
}

__global__ void drop_bwd(size_t total, const float* __restrict__ mask, const float* __restrict__ dy, float* __restrict__ dx) {
  CONVOY_GRID_STRIDE(k, total) dx[k] = dy[k] * mask[k];
}

}  // namespace

void dropout_forward(Context& ctx, const DropoutShape& s, const uint64_t* key, uint64_t salt,
                     const uint64_t* sample_keys, const float* x, float* y, float* mask) {
  const size_t total = size_t(s.n) * s.per_sample;
  drop_fwd<<<grid_for(total), 256, 0, ctx.stream()>>>(s, total, 1.f / (1.f - s.p), key, salt, sample_keys, x, y, mask);
  CONVOY_CUDA_CHECK_LAUNCH();
}

void dropout_backward(Context& ctx, const DropoutShape& s, const float* mask, const float* dy, float* dx) {
  const size_t total = size_t(s.n) * s.per_sample;
  drop_bwd<<<grid_for(total), 256, 0, ctx.stream()>>>(total, mask, dy, dx);
  CONVOY_CUDA_CHECK_LAUNCH();
}

}  // namespace convoy::gpu
