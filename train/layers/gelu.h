// The gelu op (`type = "gelu"`), PyTorch's exact GELU, y = x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)):
// the CPU reference (gelu.cpp) and its CUDA twin for fp32 or bf16 elements (gelu.cu).
#pragma once
#include <cstddef>

#include "train/layers/op.h"

#if CONVOY_HAVE_CUDA
#include "train/cuda/storage.h"
#endif

namespace convoy {

// y = x * Phi(x), Phi the standard normal distribution function.
void gelu_forward(size_t count, const float* x, float* y);
// From the forward pass's input: dx = dy * (Phi(x) + x * phi(x)), phi the standard normal density.
void gelu_backward(size_t count, const float* x, const float* dy, float* dx);

class GeluOp final : public Op {
 public:
  const char* type() const override { return "gelu"; }
  OpShape shape(const ShapeIn& in) const override;
  double forward(const CpuLayer& l) const override;
  void backward(const CpuLayer& l, int k) const override;
#if CONVOY_HAVE_CUDA
  void gpu_forward(const gpu::GpuLayer& l) const override;
  void gpu_backward(const gpu::GpuLayer& l, int k) const override;
#endif
};
const Op& gelu_op();

}  // namespace convoy

#if CONVOY_HAVE_CUDA
namespace convoy::gpu {

class Context;

// The same in fp32 arithmetic on float or bf16 elements (each bf16 result rounded once).
template <typename T>
void gelu_forward(Context& ctx, size_t count, const T* x, T* y);
template <typename T>
void gelu_backward(Context& ctx, size_t count, const T* x, const T* dy, T* dx);

}  // namespace convoy::gpu
#endif
