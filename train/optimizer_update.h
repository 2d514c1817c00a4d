// Parameter updates fused over one flat buffer of all weights: the CPU reference
// (optimizer_update.cpp) and its CUDA twin (optimizer_update.cu), one kernel over the same layout.
#pragma once
#include <cstddef>
#include <cstdint>

#if CONVOY_HAVE_CUDA
#include <cuda_runtime.h>

#include "train/cuda/step_scalars.h"
#include "train/cuda/storage.h"
#include "train/cuda/weight_copy.h"
#endif

// decay_of is the CPU's and the CUDA kernels' alike.
#if defined(__CUDACC__)
#define CONVOY_UPDATE_HD __host__ __device__ __forceinline__
#else
#define CONVOY_UPDATE_HD inline
#endif

namespace convoy {

// no_decay (null: none): a bit per element, set where the weight decay is 0 (optimizer.h's
// no_decay_mask); such an element moves by its gradient alone.
CONVOY_UPDATE_HD float decay_of(size_t i, float weight_decay, const uint32_t* no_decay) {
  return no_decay && (no_decay[i / 32] >> (i % 32) & 1u) ? 0.f : weight_decay;
}

// PyTorch's SGD: g += wd * w; buf = momentum * buf + g; w -= lr * (nesterov ? g + momentum * buf : buf).
void sgd_update(size_t n, float* w, const float* g, float* buf, float lr, float momentum, bool nesterov,
                float weight_decay, const uint32_t* no_decay = nullptr);
// Adam (weight decay added to the gradient) or AdamW (decoupled decay: w -= lr * wd * w);
// t is the 1-based step count for bias correction.
void adam_update(size_t n, float* w, const float* g, float* m, float* v, float lr, float beta1, float beta2, float eps,
                 float weight_decay, bool decoupled, long long t, const uint32_t* no_decay = nullptr);

}  // namespace convoy

#if CONVOY_HAVE_CUDA
namespace convoy::gpu {

class Context;

// The gradients an update reads: fp32 ones (one rank's, or averaged over the ranks by ncclAvg), or
// the bf16 sums of an all-reduce over `ranks` ranks, divided by ranks in fp32 as they are read.
struct Gradients {
  const float* f32 = nullptr;
  const bf16* sums = nullptr;
  int ranks = 1;
};

// The elements [lo, hi) of the flat buffers an update changes, and the stream it is queued on.
struct UpdateSpan {
  size_t lo = 0, hi = 0;
  cudaStream_t stream = nullptr;
};

// Fused over the span of the flat parameter buffer (every pointer is the buffer's start); the same
// arithmetic as optimizer_update.cpp, element by element, so an update in spans ends bit for bit
// where one over the whole buffer does. The learning rate and Adam's bias corrections come from
// the device StepScalars; where its `nonfinite` is set, nothing is changed (the step is skipped). A
// non-empty copy is refreshed from the new weights in the same pass.
// no_decay (device; null: none): as on the CPU.
void sgd_update(const UpdateSpan& at, float* w, const Gradients& g, float* buf, const StepScalars* s, float momentum,
                bool nesterov, float weight_decay, const WeightCopy& copy = {}, const uint32_t* no_decay = nullptr);
void adam_update(const UpdateSpan& at, float* w, const Gradients& g, float* m, float* v, const StepScalars* s,
                 float beta1, float beta2, float eps, float weight_decay, bool decoupled, const WeightCopy& copy = {},
                 const uint32_t* no_decay = nullptr);
// dst = src where s->nonfinite is set, else nothing: batch norm's running statistics, saved before
// the forward pass of a step whose update is skipped, put back.
void restore_if_nonfinite(Context& ctx, size_t n, float* dst, const float* src, const StepScalars* s);

}  // namespace convoy::gpu
#endif
