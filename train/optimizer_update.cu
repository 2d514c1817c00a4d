// CUDA twin of optimizer_update.cpp: one kernel over a span of the flat buffer of all parameters, so
// an update is one launch whatever the number of layers (the whole buffer, or one all-reduce bucket
// as soon as its sums have arrived); LARS, three (norms, rates, update). A bf16 net's weight copy is
// written in the same pass, from the new fp32 weights.
#include <cmath>

#include "train/cuda/gpu_context.h"
#include "train/cuda/weight_copy.cuh"
#include "train/optimizer_update.h"

namespace convoy::gpu {
namespace {

template <bool kCopy>
__device__ __forceinline__ void keep(size_t i, float w, const WeightCopy& copy) {
  if (kCopy) copy.w[copy_index(i, copy.segments, copy.count)] = __float2bfloat16_rn(w);
}

// Gradient i: fp32 as it is, or a bf16 sum over the ranks divided by their number.
template <bool kSums>
__device__ __forceinline__ float grad(const Gradients& g, size_t i) {
  if (kSums) return __bfloat162float(g.sums[i]) / float(g.ranks);
  return g.f32[i];
}

// Grid-stride over the span [lo, hi): i is the element's index in the whole flat buffer.
#define CONVOY_SPAN_STRIDE(i, lo, hi) \
  for (size_t i = (lo) + blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < (hi); i += size_t(gridDim.x) * blockDim.x)

template <bool kCopy, bool kSums>
__global__ void sgd(size_t lo, size_t hi, float* __restrict__ w, Gradients g, float* __restrict__ buf,
                    const StepScalars* __restrict__ s, float momentum, bool nesterov, float weight_decay,
                    const uint32_t* __restrict__ no_decay, WeightCopy copy) {
  if (s->nonfinite) return;
  const float lr = s->lr;
  CONVOY_SPAN_STRIDE(i, lo, hi) {
    const float d = grad<kSums>(g, i) + decay_of(i, weight_decay, no_decay) * w[i];
    const float b = momentum * buf[i] + d;
    buf[i] = b;
    const float wi = w[i] - lr * (nesterov ? d + momentum * b : b);
    w[i] = wi;
    keep<kCopy>(i, wi, copy);
  }
}

template <bool kCopy, bool kSums>
__global__ void adam(size_t lo, size_t hi, float* __restrict__ w, Gradients g, float* __restrict__ m,
                     float* __restrict__ v, const StepScalars* __restrict__ s, float beta1, float beta2, float eps,
                     float weight_decay, bool decoupled, const uint32_t* __restrict__ no_decay, WeightCopy copy) {
  if (s->nonfinite) return;
  const float lr = s->lr, c1 = s->c1, c2 = s->c2;
  CONVOY_SPAN_STRIDE(i, lo, hi) {
    float d = grad<kSums>(g, i);
    float wi = w[i];
    const float wd = decay_of(i, weight_decay, no_decay);
    if (decoupled)
      wi -= lr * wd * wi;
    else
      d += wd * wi;
    const float mi = beta1 * m[i] + (1 - beta1) * d;
    const float vi = beta2 * v[i] + (1 - beta2) * d * d;
    m[i] = mi;
    v[i] = vi;
    wi -= lr * (mi / c1) / (sqrtf(vi / c2) + eps);
    w[i] = wi;
    keep<kCopy>(i, wi, copy);
  }
}

// LARS's blocks: one a chunk (LarsPlan), so that a tensor's norms are summed in a fixed order.
constexpr int kLarsThreads = 256;

// Block b: the sums of w^2 and of g^2 over chunk c0 + b, where its tensor is adapted, in double as
// on the CPU (a tensor's norms then agree with the CPU's to the last bits of its float rate).
template <bool kSums>
__global__ void lars_sums(size_t c0, const float* __restrict__ w, Gradients g, const LarsTensor* __restrict__ tensors,
                          const LarsChunk* __restrict__ chunks, double* __restrict__ sums,
                          const StepScalars* __restrict__ s) {
  const size_t c = c0 + blockIdx.x;
  const LarsChunk ch = chunks[c];
  if (s->nonfinite || !tensors[ch.tensor].adapt) return;  // the whole block alike
  double w2 = 0, g2 = 0;
  for (size_t i = ch.lo + threadIdx.x; i < ch.hi; i += kLarsThreads) {
    const double wi = w[i], gi = grad<kSums>(g, i);
    w2 += wi * wi;
    g2 += gi * gi;
  }
  __shared__ double sw[kLarsThreads], sg[kLarsThreads];
  sw[threadIdx.x] = w2;
  sg[threadIdx.x] = g2;
  __syncthreads();
  for (int half = kLarsThreads / 2; half > 0; half /= 2) {
    if (int(threadIdx.x) < half) {
      sw[threadIdx.x] += sw[threadIdx.x + half];
      sg[threadIdx.x] += sg[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    sums[2 * c] = sw[0];
    sums[2 * c + 1] = sg[0];
  }
}

// Each tensor of [t0, t1): its chunks' sums added in their order, as the CPU adds them, and its rate.
__global__ void lars_rates(size_t t0, size_t t1, const LarsTensor* __restrict__ tensors,
                           const double* __restrict__ sums, float* __restrict__ rates,
                           const StepScalars* __restrict__ s, float eta, float weight_decay, float eps) {
  if (s->nonfinite) return;
  const float lr = s->lr;
  for (size_t t = t0 + blockIdx.x * size_t(blockDim.x) + threadIdx.x; t < t1; t += size_t(gridDim.x) * blockDim.x) {
    const LarsTensor tn = tensors[t];
    float rate = lr;
    if (tn.adapt) {
      double w2 = 0, g2 = 0;
      for (size_t c = tn.first_chunk; c < size_t(tn.first_chunk) + tn.chunks; ++c) {
        w2 += sums[2 * c];
        g2 += sums[2 * c + 1];
      }
      rate = lars_rate(w2, g2, lr, eta, weight_decay, eps);
    }
    rates[t] = rate;
  }
}

// Block b: the update of chunk c0 + b at its tensor's rate.
template <bool kCopy, bool kSums>
__global__ void lars(size_t c0, float* __restrict__ w, Gradients g, float* __restrict__ buf,
                     const LarsTensor* __restrict__ tensors, const LarsChunk* __restrict__ chunks,
                     const float* __restrict__ rates, const StepScalars* __restrict__ s, float momentum, bool nesterov,
                     float weight_decay, WeightCopy copy) {
  if (s->nonfinite) return;
  const LarsChunk ch = chunks[c0 + blockIdx.x];
  const float rate = rates[ch.tensor], decay = tensors[ch.tensor].adapt ? weight_decay : 0.f;
  for (size_t i = ch.lo + threadIdx.x; i < ch.hi; i += kLarsThreads) {
    float b = buf[i];
    const float wi = lars_element(w[i], grad<kSums>(g, i), b, rate, decay, momentum, nesterov);
    buf[i] = b;
    w[i] = wi;
    keep<kCopy>(i, wi, copy);
  }
}

__global__ void restore(size_t n, float* __restrict__ dst, const float* __restrict__ src,
                        const StepScalars* __restrict__ s) {
  if (!s->nonfinite) return;
  CONVOY_GRID_STRIDE(i, n) dst[i] = src[i];
}

// Launches kernel<kCopy, kSums> in `blocks` blocks, the two flags picked from copy and g.
template <template <bool, bool> class K, typename... Args>
void launch_flags(unsigned blocks, const UpdateSpan& at, const WeightCopy& copy, const Gradients& g, Args... args) {
  const bool c = copy.w != nullptr, sums = g.sums != nullptr;
  if (c && sums)
    K<true, true>::launch(blocks, at, g, copy, args...);
  else if (c)
    K<true, false>::launch(blocks, at, g, copy, args...);
  else if (sums)
    K<false, true>::launch(blocks, at, g, copy, args...);
  else
    K<false, false>::launch(blocks, at, g, copy, args...);
  CONVOY_CUDA_CHECK_LAUNCH();
}

// Launches kernel<kCopy, kSums> over the span's elements.
template <template <bool, bool> class K, typename... Args>
void launch_span(const UpdateSpan& at, const WeightCopy& copy, const Gradients& g, Args... args) {
  if (at.hi <= at.lo) return;
  launch_flags<K>(grid_for(at.hi - at.lo), at, copy, g, args...);
}

template <bool kCopy, bool kSums>
struct Sgd {
  static void launch(unsigned blocks, const UpdateSpan& at, const Gradients& g, const WeightCopy& copy, float* w,
                     float* buf, const StepScalars* s, float momentum, bool nesterov, float weight_decay,
                     const uint32_t* no_decay) {
    sgd<kCopy, kSums>
        <<<blocks, 256, 0, at.stream>>>(at.lo, at.hi, w, g, buf, s, momentum, nesterov, weight_decay, no_decay, copy);
  }
};

template <bool kCopy, bool kSums>
struct Adam {
  static void launch(unsigned blocks, const UpdateSpan& at, const Gradients& g, const WeightCopy& copy, float* w,
                     float* m, float* v, const StepScalars* s, float beta1, float beta2, float eps, float weight_decay,
                     bool decoupled, const uint32_t* no_decay) {
    adam<kCopy, kSums><<<blocks, 256, 0, at.stream>>>(at.lo, at.hi, w, g, m, v, s, beta1, beta2, eps, weight_decay,
                                                      decoupled, no_decay, copy);
  }
};

template <bool kCopy, bool kSums>
struct Lars {
  static void launch(unsigned blocks, const UpdateSpan& at, const Gradients& g, const WeightCopy& copy, size_t c0,
                     float* w, float* buf, const LarsDevice& lars_, const StepScalars* s, float momentum, bool nesterov,
                     float weight_decay) {
    lars<kCopy, kSums><<<blocks, kLarsThreads, 0, at.stream>>>(c0, w, g, buf, lars_.tensors, lars_.chunks, lars_.rates,
                                                               s, momentum, nesterov, weight_decay, copy);
  }
};

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

void sgd_update(const UpdateSpan& at, float* w, const Gradients& g, float* buf, const StepScalars* s, float momentum,
                bool nesterov, float weight_decay, const WeightCopy& copy, const uint32_t* no_decay) {
  launch_span<Sgd>(at, copy, g, w, buf, s, momentum, nesterov, weight_decay, no_decay);
}

void adam_update(const UpdateSpan& at, float* w, const Gradients& g, float* m, float* v, const StepScalars* s,
                 float beta1, float beta2, float eps, float weight_decay, bool decoupled, const WeightCopy& copy,
                 const uint32_t* no_decay) {
  launch_span<Adam>(at, copy, g, w, m, v, s, beta1, beta2, eps, weight_decay, decoupled, no_decay);
}

void lars_update(const UpdateSpan& at, float* w, const Gradients& g, float* buf, const StepScalars* s,
                 const LarsDevice& lars_, float momentum, bool nesterov, float weight_decay, float eta, float eps,
                 const WeightCopy& copy) {
  const LarsSlice sl = lars_.host->slice(at.lo, at.hi);
  if (sl.c1 <= sl.c0) return;
  const unsigned chunks = unsigned(sl.c1 - sl.c0);
  if (g.sums)
    lars_sums<true><<<chunks, kLarsThreads, 0, at.stream>>>(sl.c0, w, g, lars_.tensors, lars_.chunks, lars_.sums, s);
  else
    lars_sums<false><<<chunks, kLarsThreads, 0, at.stream>>>(sl.c0, w, g, lars_.tensors, lars_.chunks, lars_.sums, s);
  CONVOY_CUDA_CHECK_LAUNCH();
  lars_rates<<<grid_for(sl.t1 - sl.t0, 128), 128, 0, at.stream>>>(sl.t0, sl.t1, lars_.tensors, lars_.sums, lars_.rates,
                                                                  s, eta, weight_decay, eps);
  CONVOY_CUDA_CHECK_LAUNCH();
  launch_flags<Lars>(chunks, at, copy, g, sl.c0, w, buf, lars_, s, momentum, nesterov, weight_decay);
}

void restore_if_nonfinite(Context& ctx, size_t n, float* dst, const float* src, const StepScalars* s) {
  restore<<<grid_for(n), 256, 0, ctx.stream()>>>(n, dst, src, s);
  CONVOY_CUDA_CHECK_LAUNCH();
}

}  // namespace convoy::gpu
