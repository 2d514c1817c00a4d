// Parameter updates fused over one flat buffer of all weights: the CPU reference
// (optimizer_update.cpp) and its CUDA twin (optimizer_update.cu), one kernel over the same layout.
#pragma once
#include <cstddef>

#if CONVOY_HAVE_CUDA
#include "train/cuda/step_scalars.h"
#include "train/cuda/weight_copy.h"
#endif

namespace convoy {

// PyTorch's SGD: g += wd * w; buf = momentum * buf + g; w -= lr * (nesterov ? g + momentum * buf : buf).
void sgd_update(size_t n, float* w, const float* g, float* buf, float lr, float momentum, bool nesterov,
                float weight_decay);
// Adam (weight decay added to the gradient) or AdamW (decoupled decay: w -= lr * wd * w);
// t is the 1-based step count for bias correction.
void adam_update(size_t n, float* w, const float* g, float* m, float* v, float lr, float beta1, float beta2, float eps,
                 float weight_decay, bool decoupled, long long t);

}  // namespace convoy

#if CONVOY_HAVE_CUDA
namespace convoy::gpu {

class Context;

// Fused over the flat parameter buffer; the same arithmetic as optimizer_update.cpp. The learning
// rate and Adam's bias corrections come from the device StepScalars; where its `nonfinite` is set,
// nothing is changed (the step is skipped). A non-empty copy is refreshed from the new weights in
// the same pass.
void sgd_update(Context& ctx, size_t n, float* w, const float* g, float* buf, const StepScalars* s, float momentum,
                bool nesterov, float weight_decay, const WeightCopy& copy = {});
void adam_update(Context& ctx, size_t n, float* w, const float* g, float* m, float* v, const StepScalars* s,
                 float beta1, float beta2, float eps, float weight_decay, bool decoupled, const WeightCopy& copy = {});
// dst = src where s->nonfinite is set, else nothing: batch norm's running statistics, saved before
// the forward pass of a step whose update is skipped, put back.
void restore_if_nonfinite(Context& ctx, size_t n, float* dst, const float* src, const StepScalars* s);

}  // namespace convoy::gpu
#endif
