// Softmax cross-entropy loss over logits [n, classes] and integer labels: the CPU reference
// (softmax_xent.cpp) and its CUDA twin (softmax_xent.cu).
#pragma once

#if CONVOY_HAVE_CUDA
#include "train/cuda/storage.h"
#endif

namespace convoy {

// probs gets the softmax; loss[i] the per-sample loss. Returns the mean loss.
double softmax_xent_forward(int n, int classes, const float* logits, const int* labels,
                            float* probs, float* loss);
// d(mean loss)/d(logits) = (probs - onehot) * grad_scale, where grad_scale is normally 1 / n.
void softmax_xent_backward(int n, int classes, const float* probs, const int* labels,
                           float grad_scale, float* dlogits);

}  // namespace convoy

#if CONVOY_HAVE_CUDA
namespace convoy::gpu {

class Context;

// loss (device, n floats) gets the per-sample loss; the mean is left to the caller so the step
// needs no host synchronisation. Logits and their gradient may be bf16; probs, the loss and the
// arithmetic are fp32.
template <typename T>
void softmax_xent_forward(Context& ctx, int n, int classes, const T* logits, const int* labels, float* probs,
                          float* loss);
template <typename T>
void softmax_xent_backward(Context& ctx, int n, int classes, const float* probs, const int* labels,
                           float grad_scale, T* dlogits);
}  // namespace convoy::gpu
#endif
