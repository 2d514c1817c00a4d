// Fully connected layer: y[n][out] = x[n][in] . w[out][in] + b[out]. The shape struct is shared
// with the CUDA twin (fc.cu).
#pragma once
#include <cstddef>

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
