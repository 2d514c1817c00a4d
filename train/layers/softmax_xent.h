// Softmax cross-entropy loss over logits [n, classes] and integer labels. Shared with the CUDA
// twin (softmax_xent.cu).
#pragma once

namespace convoy {

// probs gets the softmax; loss[i] the per-sample loss. Returns the mean loss.
double softmax_xent_forward(int n, int classes, const float* logits, const int* labels,
                            float* probs, float* loss);
// d(mean loss)/d(logits) = (probs - onehot) * grad_scale, where grad_scale is normally 1 / n.
void softmax_xent_backward(int n, int classes, const float* probs, const int* labels,
                           float grad_scale, float* dlogits);

}  // namespace convoy
