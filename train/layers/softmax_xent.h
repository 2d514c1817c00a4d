// The softmax_xent op (`type = "softmax_xent"`, the loss), softmax cross-entropy over logits
// [n, classes] and integer labels: the CPU reference (softmax_xent.cpp) and its CUDA twin (softmax_xent.cu).
#pragma once

#include "train/layers/op.h"

#if CONVOY_HAVE_CUDA
#include "train/cuda/storage.h"
#endif

namespace convoy {

// probs gets the softmax; loss[i] the per-sample loss. Returns the mean loss.
double softmax_xent_forward(int n, int classes, const float* logits, const int* labels, float* probs, float* loss);
// d(mean loss)/d(logits) = (probs - onehot) * grad_scale, where grad_scale is normally 1 / n.
void softmax_xent_backward(int n, int classes, const float* probs, const int* labels, float grad_scale, float* dlogits);

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
// arithmetic are fp32.
template <typename T>
void softmax_xent_forward(Context& ctx, int n, int classes, const T* logits, const int* labels, float* probs,
                          float* loss);
template <typename T>
void softmax_xent_backward(Context& ctx, int n, int classes, const float* probs, const int* labels, float grad_scale,
                           T* dlogits);
}  // namespace convoy::gpu
#endif
