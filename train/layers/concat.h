// The concat op (`type = "concat"`): its inputs joined along the channels in `inputs` order, as
// torch.cat(xs, 1) (GoogLeNet's inception blocks): the CPU reference over NCHW (concat.cpp) and its
// CUDA twin for fp32 NCHW or bf16 NHWC (concat.cu), each input copied into its slice of the output.
#pragma once
#include <cstddef>

#include "train/layers/op.h"

#if CONVOY_HAVE_CUDA
#include "train/cuda/storage.h"
#endif

namespace convoy {

// Where one input's values lie in the output: `runs` runs of `width` values, packed in the input and
// `pitch` apart in the output from `offset` on. NCHW: a run per image (the input's planes); NHWC: a
// run per pixel (the input's channels).
struct ConcatSlice {
  size_t runs = 0, width = 0, pitch = 0, offset = 0;
};

// Input k's slice of a concat node's output for a batch of n, in NCHW or (nhwc) NHWC.
ConcatSlice concat_slice(const Node& nd, int k, int n, bool nhwc = false);

// y's slice = x.
void concat_forward(const ConcatSlice& s, const float* x, float* y);
// dx = y's slice of dy.
void concat_backward(const ConcatSlice& s, const float* dy, float* dx);

class ConcatOp final : public Op {
 public:
  const char* type() const override { return "concat"; }
  int arity() const override { return 2; }
  int max_arity() const override { return kMaxInputs; }
  OpShape shape(const ShapeIn& in) const override;
  double forward(const CpuLayer& l) const override;
  void backward(const CpuLayer& l, int k) const override;
  // Its backward pass adds each input's gradient to dx in its own copy (GpuLayer::dx_add).
  OpFusion fusion(const Node& /*nd*/) const override {
    OpFusion f;
    f.adds_to_dx = true;
    return f;
  }
#if CONVOY_HAVE_CUDA
  void gpu_forward(const gpu::GpuLayer& l) const override;
  void gpu_backward(const gpu::GpuLayer& l, int k) const override;
#endif
};
const Op& concat_op();

}  // namespace convoy

#if CONVOY_HAVE_CUDA
namespace convoy::gpu {

class Context;

// The same copies on the device, for float or bf16 elements; with add, dx += the slice of dy.
template <typename T>
void concat_forward(Context& ctx, const ConcatSlice& s, const T* x, T* y);
template <typename T>
void concat_backward(Context& ctx, const ConcatSlice& s, const T* dy, T* dx, bool add = false);

}  // namespace convoy::gpu
#endif
