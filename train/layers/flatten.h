// The flatten op (`type = "flatten"`): a sample's values as one vector in the CPU's NCHW order, a
// copy on the CPU (flatten.cpp) and on the GPU, where a bf16 net reorders its NHWC tensor (flatten.cu).
#pragma once
#include "train/layers/op.h"

namespace convoy {

class FlattenOp final : public Op {
 public:
  const char* type() const override { return "flatten"; }
  OpShape shape(const ShapeIn& in) const override;
  double forward(const CpuLayer& l) const override;
  void backward(const CpuLayer& l, int k) const override;
#if CONVOY_HAVE_CUDA
  void gpu_forward(const gpu::GpuLayer& l) const override;
  void gpu_backward(const gpu::GpuLayer& l, int k) const override;
#endif
};
const Op& flatten_op();

}  // namespace convoy
