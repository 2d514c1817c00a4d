// Parameter updates fused over one flat buffer of all weights: the CPU reference
// (optimizer_update.cpp) and its CUDA twin (optimizer_update.cu), one kernel over the same layout.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "train/lars_plan.h"

#if CONVOY_HAVE_CUDA
#include <cuda_runtime.h>

#include "train/cuda/step_scalars.h"
#include "train/cuda/storage.h"
#include "train/cuda/weight_copy.h"
#endif

// decay_of and the LARS helpers are the CPU's and the CUDA kernels' alike.
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

// LARS as MLPerf's ResNet-50 reference has it (mlcommons/training,
// image_classification/tensorflow2/lars_optimizer.py, LARSOptimizer: compute_lr and
// _resource_apply_dense), per parameter tensor: trust = eta ||w|| / (||g|| + wd ||w|| + eps), 1
// where ||w|| or ||g|| is 0; rate = lr * trust. Then, element by element, u = rate * (g + wd w),
// v = momentum v + u, w -= v (nesterov: w -= u + momentum v). A tensor of its skip list (batch
// norm's, the biases: LarsTensor::adapt clear) has rate = lr and no decay. (Its runs pass epsilon
// 0, which that Keras optimiser turns into Keras's 1e-7; the TF1 reference, mlperf_lars_optimizer.py,
// keeps 0. Beside wd ||w|| either is negligible.)
// The rate of a tensor whose squared norms are w2 and g2.
CONVOY_UPDATE_HD float lars_rate(double w2, double g2, float lr, float eta, float weight_decay, float eps) {
  const double wn = sqrt(w2), gn = sqrt(g2);
  if (!(wn > 0 && gn > 0)) return lr;
  return float(double(lr) * double(eta) * wn / (gn + double(weight_decay) * wn + double(eps)));
}

// One element's LARS step at its tensor's rate and decay; returns the new weight.
CONVOY_UPDATE_HD float lars_element(float w, float g, float& buf, float rate, float decay, float momentum,
                                    bool nesterov) {
  const float u = rate * (g + decay * w);
  const float b = momentum * buf + u;
  buf = b;
  return w - (nesterov ? u + momentum * b : b);
}

// PyTorch's SGD: g += wd * w; buf = momentum * buf + g; w -= lr * (nesterov ? g + momentum * buf : buf).
void sgd_update(size_t n, float* w, const float* g, float* buf, float lr, float momentum, bool nesterov,
                float weight_decay, const uint32_t* no_decay = nullptr);
// Adam (weight decay added to the gradient) or AdamW (decoupled decay: w -= lr * wd * w);
// t is the 1-based step count for bias correction.
void adam_update(size_t n, float* w, const float* g, float* m, float* v, float lr, float beta1, float beta2, float eps,
                 float weight_decay, bool decoupled, long long t, const uint32_t* no_decay = nullptr);
// LARS over the plan's tensors (the whole flat buffer); buf is the momentum.
void lars_update(const LarsPlan& plan, float* w, const float* g, float* buf, float lr, float momentum, bool nesterov,
                 float weight_decay, float eta, float eps);

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
// LARS's plan on the device, and its scratch: per chunk, the sums of w^2 and g^2 (2 doubles);
// per tensor, its rate. `host` is the same plan, from which each update span's tensors are found.
struct LarsDevice {
  const LarsPlan* host = nullptr;
  const LarsTensor* tensors = nullptr;
  const LarsChunk* chunks = nullptr;
  double* sums = nullptr;
  float* rates = nullptr;
};
// LARS over the span, which must hold whole tensors (LarsPlan::slice): the tensors' norms, their
// rates, then the update, three kernels queued on the span's stream.
void lars_update(const UpdateSpan& at, float* w, const Gradients& g, float* buf, const StepScalars* s,
                 const LarsDevice& lars, float momentum, bool nesterov, float weight_decay, float eta, float eps,
                 const WeightCopy& copy = {});
// dst = src where s->nonfinite is set, else nothing: batch norm's running statistics, saved before
// the forward pass of a step whose update is skipped, put back.
void restore_if_nonfinite(Context& ctx, size_t n, float* dst, const float* src, const StepScalars* s);

}  // namespace convoy::gpu
#endif
