// Parameter updates fused over one flat buffer of all weights (the CUDA twin runs the same
// update in one kernel over the same layout).
#pragma once
#include <cstddef>

namespace convoy {

// PyTorch's SGD: g += wd * w; buf = momentum * buf + g; w -= lr * (nesterov ? g + momentum * buf : buf).
void sgd_update(size_t n, float* w, const float* g, float* buf, float lr, float momentum,
                bool nesterov, float weight_decay);
// Adam (weight decay added to the gradient) or AdamW (decoupled decay: w -= lr * wd * w);
// t is the 1-based step count for bias correction.
void adam_update(size_t n, float* w, const float* g, float* m, float* v, float lr, float beta1,
                 float beta2, float eps, float weight_decay, bool decoupled, long long t);

}  // namespace convoy
