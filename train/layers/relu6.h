// The relu6 op (`type = "relu6"`, PyTorch's ReLU6, MobileNetV2's activation): y = min(max(x, 0), 6),
// the CPU reference (relu6.cpp) and its CUDA twin for fp32 or bf16 elements (relu6.cu). It is an op
// of its own, not a relu option, so that the passes that run a ReLU inside the layer before it
// take it only where they say they clip (OpFusion::relu6_bf16: batch norm), never for a ReLU.
#pragma once
#include <cstddef>

#include "train/layers/op.h"

#if CONVOY_HAVE_CUDA
#include "train/cuda/storage.h"
#endif

namespace convoy {

void relu6_forward(size_t count, const float* x, float* y);
// From the forward output: dx = dy where 0 < y < 6 (PyTorch's hardtanh gradient: none at the
// bounds, where the output is 0 or 6 exactly).
void relu6_backward(size_t count, const float* y, const float* dy, float* dx);

class Relu6Op final : public Op {
 public:
  const char* type() const override { return "relu6"; }
  bool is_relu6() const override { return true; }
  OpShape shape(const ShapeIn& in) const override;
  double forward(const CpuLayer& l) const override;
  void backward(const CpuLayer& l, int k) const override;
#if CONVOY_HAVE_CUDA
  void gpu_forward(const gpu::GpuLayer& l) const override;
  void gpu_backward(const gpu::GpuLayer& l, int k) const override;
#endif
};
const Op& relu6_op();

}  // namespace convoy

#if CONVOY_HAVE_CUDA
namespace convoy::gpu {

class Context;

// The same on float or bf16 elements (exact in both: 6 is a bf16 value).
template <typename T>
void relu6_forward(Context& ctx, size_t count, const T* x, T* y);
template <typename T>
void relu6_backward(Context& ctx, size_t count, const T* y, const T* dy, T* dx);

}  // namespace convoy::gpu
#endif
