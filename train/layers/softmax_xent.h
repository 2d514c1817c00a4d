// The softmax_xent op (`type = "softmax_xent"`, the loss), softmax cross-entropy over logits
// [n, classes] and integer labels: the CPU reference (softmax_xent.cpp) and its CUDA twin (softmax_xent.cu).
#pragma once

#include "train/layers/op.h"

#if CONVOY_HAVE_CUDA
#include "train/cuda/storage.h"
#endif

namespace convoy {

// probs gets the softmax; loss[i] the per-sample loss. Returns the mean loss. With smoothing eps
// (0 <= eps < 1), the target is (1 - eps) * onehot + eps / classes, as PyTorch's
// CrossEntropyLoss(label_smoothing = eps): loss = (1 - eps) * -log p[label] + eps * mean(-log p).
double softmax_xent_forward(int n, int classes, const float* logits, const int* labels, float* probs, float* loss,
                            float smoothing = 0.f);
// d(mean loss)/d(logits) = (probs - target) * grad_scale, where grad_scale is normally 1 / n.
void softmax_xent_backward(int n, int classes, const float* probs, const int* labels, float grad_scale, float* dlogits,
                           float smoothing = 0.f);

// The target's value at the label and elsewhere: 1 and 0 without smoothing, exactly.
struct SmoothedTarget {
  float on, off;
};
inline SmoothedTarget smoothed_target(int classes, float smoothing) {
  const float off = smoothing / float(classes);
  return {1.f - smoothing + off, off};
}

// The loss of the last layer takes the recipe's label smoothing in training (CpuLayer and
// gpu::GpuBatch carry it); evaluation reports the plain cross-entropy.

// The last layer: the net's probabilities and per-sample losses; its input's width is the classes.
class SoftmaxXentOp final : public Op {
 public:
  const char* type() const override { return "softmax_xent"; }
  bool is_loss() const override { return true; }
  OpShape shape(const ShapeIn& in) const override;
  double forward(const CpuLayer& l) const override;
  void backward(const CpuLayer& l, int k) const override;
#if CONVOY_HAVE_CUDA
  void gpu_forward(const gpu::GpuLayer& l) const override;
  void gpu_backward(const gpu::GpuLayer& l, int k) const override;
#endif
};
const Op& softmax_xent_op();

}  // namespace convoy

#if CONVOY_HAVE_CUDA
namespace convoy::gpu {

class Context;

// loss (device, n floats) gets the per-sample loss; the mean is left to the caller so the step
// needs no host synchronisation. Logits and their gradient may be bf16; probs, the loss and the
// arithmetic are fp32. smoothing: as on the CPU.
template <typename T>
void softmax_xent_forward(Context& ctx, int n, int classes, const T* logits, const int* labels, float* probs,
                          float* loss, float smoothing = 0.f);
template <typename T>
void softmax_xent_backward(Context& ctx, int n, int classes, const float* probs, const int* labels, float grad_scale,
                           T* dlogits, float smoothing = 0.f);
}  // namespace convoy::gpu
#endif
