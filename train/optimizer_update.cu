// CUDA twin of optimizer_update.cpp: one kernel over the flat buffer of all parameters, so an
// update is one launch whatever the number of layers. A bf16 net's weight copy is written in the
// same pass, from the new fp32 weights.
#include <cmath>

#include "train/cuda/weight_copy.cuh"
#include "train/gpu_context.h"
#include "train/optimizer_update.h"

namespace convoy::gpu {
namespace {

template <bool kCopy>
__device__ __forceinline__ void keep(size_t i, float w, const WeightCopy& copy) {
  if (kCopy) copy.w[copy_index(i, copy.segments, copy.count)] = __float2bfloat16_rn(w);
}

template <bool kCopy>
__global__ void sgd(size_t n, float* __restrict__ w, const float* __restrict__ g, float* __restrict__ buf,
                    const StepScalars* __restrict__ s, float momentum, bool nesterov, float weight_decay,
                    WeightCopy copy) {
  if (s->nonfinite) return;
  const float lr = s->lr;
  CONVOY_GRID_STRIDE(i, n) {
    const float d = g[i] + weight_decay * w[i];
    const float b = momentum * buf[i] + d;
    buf[i] = b;
    const float wi = w[i] - lr * (nesterov ? d + momentum * b : b);
    w[i] = wi;
    keep<kCopy>(i, wi, copy);
  }
}

template <bool kCopy>
__global__ void adam(size_t n, float* __restrict__ w, const float* __restrict__ g, float* __restrict__ m,
                     float* __restrict__ v, const StepScalars* __restrict__ s, float beta1, float beta2, float eps,
                     float weight_decay, bool decoupled, WeightCopy copy) {
  if (s->nonfinite) return;
  const float lr = s->lr, c1 = s->c1, c2 = s->c2;
  CONVOY_GRID_STRIDE(i, n) {
    float d = g[i];
    float wi = w[i];
    if (decoupled)
      wi -= lr * weight_decay * wi;
    else
      d += weight_decay * wi;
    const float mi = beta1 * m[i] + (1 - beta1) * d;
    const float vi = beta2 * v[i] + (1 - beta2) * d * d;
    m[i] = mi;
    v[i] = vi;
    wi -= lr * (mi / c1) / (sqrtf(vi / c2) + eps);
    w[i] = wi;
    keep<kCopy>(i, wi, copy);
  }
}

__global__ void restore(size_t n, float* __restrict__ dst, const float* __restrict__ src,
                        const StepScalars* __restrict__ s) {
  if (!s->nonfinite) return;
  CONVOY_GRID_STRIDE(i, n) dst[i] = src[i];
}

}  // namespace

StepScalars step_scalars(uint64_t key, double lr, double beta1, double beta2, long long t) {
  StepScalars s;
  s.key = key;
  s.lr = float(lr);
  // As optimizer_update.cpp computes them, so both backends take the same steps.
  s.c1 = 1.f - float(std::pow(beta1, double(t)));
  s.c2 = 1.f - float(std::pow(beta2, double(t)));
  return s;
}

void sgd_update(Context& ctx, size_t n, float* w, const float* g, float* buf, const StepScalars* s, float momentum,
                bool nesterov, float weight_decay, const WeightCopy& copy) {
  if (copy.w)
    sgd<true><<<grid_for(n), 256, 0, ctx.stream()>>>(n, w, g, buf, s, momentum, nesterov, weight_decay, copy);
  else
    sgd<false><<<grid_for(n), 256, 0, ctx.stream()>>>(n, w, g, buf, s, momentum, nesterov, weight_decay, copy);
  CONVOY_CUDA_CHECK_LAUNCH();
}

void adam_update(Context& ctx, size_t n, float* w, const float* g, float* m, float* v, const StepScalars* s,
                 float beta1, float beta2, float eps, float weight_decay, bool decoupled, const WeightCopy& copy) {
  if (copy.w)
    adam<true>
        <<<grid_for(n), 256, 0, ctx.stream()>>>(n, w, g, m, v, s, beta1, beta2, eps, weight_decay, decoupled, copy);
  else
    adam<false>
        <<<grid_for(n), 256, 0, ctx.stream()>>>(n, w, g, m, v, s, beta1, beta2, eps, weight_decay, decoupled, copy);
  CONVOY_CUDA_CHECK_LAUNCH();
}

void restore_if_nonfinite(Context& ctx, size_t n, float* dst, const float* src, const StepScalars* s) {
  restore<<<grid_for(n), 256, 0, ctx.stream()>>>(n, dst, src, s);
  CONVOY_CUDA_CHECK_LAUNCH();
}

}  // namespace convoy::gpu
