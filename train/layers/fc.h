// The fc op (`type = "fc"`), y[n][out] = x[n][in] . w[out][in] + b[out]: the CPU reference
// (fc.cpp) and its CUDA twin (fc.cu) share the shape struct.
#pragma once
#include <cstddef>

#include "train/layers/op.h"

#if CONVOY_HAVE_CUDA
#include "train/cuda/storage.h"
#endif

namespace convoy {

struct FcShape {
  int n = 0, in = 0, out = 0;
  size_t weight_count() const { return size_t(in) * out; }
};

void fc_forward(const FcShape& s, const float* x, const float* w, const float* b, float* y);
// dw and db are overwritten; dx may be null.
void fc_backward(const FcShape& s, const float* x, const float* w, const float* dy, float* dx, float* dw, float* db);

constexpr int kClassUnits = -1;  // units = "classes"

struct FcParams : OpParams {
  int units = 0;  // kClassUnits: as many as the dataset has classes
  bool bias = true;
};

class FcOp final : public Op {
 public:
  const char* type() const override { return "fc"; }
  std::vector<std::string> keys() const override { return {"units", "bias"}; }
  std::shared_ptr<const OpParams> parse(const LayerKeys& k) const override;
  std::string example() const override { return "units = 5\n"; }
  std::string wants_classes(const LayerSpec& s) const override;
  OpShape shape(const ShapeIn& in) const override;
  double forward(const CpuLayer& l) const override;
  void backward(const CpuLayer& l, int k) const override;
#if CONVOY_HAVE_CUDA
  bool fp32_logits() const override { return true; }
  void gpu_setup(gpu::GpuSetup& s) const override;
  void gpu_forward(const gpu::GpuLayer& l) const override;
  void gpu_backward(const gpu::GpuLayer& l, int k) const override;
#endif
};
const Op& fc_op();

}  // namespace convoy

#if CONVOY_HAVE_CUDA
namespace convoy::gpu {

class Context;

void fc_forward(Context& ctx, const FcShape& s, const float* x, const float* w, const float* b, float* y);
void fc_backward(Context& ctx, const FcShape& s, const float* x, const float* w, const float* dy, float* dx, float* dw,
                 float* db);
// bf16 inputs x [n, in] (in the CPU's NCHW flatten order) and w (the bf16 copy, [out, in]), fp32
// accumulation; y bf16, or fp32 for the logits. dy bf16, or fp32 (the logits' gradient, rounded into
// dy_scratch [n, out] for the products); dw and db are fp32.
template <typename Out>
void fc_forward(Context& ctx, const FcShape& s, const bf16* x, const bf16* w, const float* b, Out* y);
template <typename G>
void fc_backward(Context& ctx, const FcShape& s, const bf16* x, const bf16* w, const G* dy, bf16* dx, float* dw,
                 float* db, bf16* dy_scratch);

}  // namespace convoy::gpu
#endif
