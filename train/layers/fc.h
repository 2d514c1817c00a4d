// Fully connected layer: y[n][out] = x[n][in] . w[out][in] + b[out]; the CPU reference (fc.cpp)
// and its CUDA twin (fc.cu) share the shape struct.
#pragma once
#include <cstddef>

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
void fc_backward(const FcShape& s, const float* x, const float* w, const float* dy, float* dx,
                 float* dw, float* db);

}  // namespace convoy

#if CONVOY_HAVE_CUDA
namespace convoy::gpu {

class Context;

void fc_forward(Context& ctx, const FcShape& s, const float* x, const float* w, const float* b, float* y);
void fc_backward(Context& ctx, const FcShape& s, const float* x, const float* w, const float* dy, float* dx,
                 float* dw, float* db);
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
