// Convolution over NCHW float tensors (im2col + sgemm on the CPU). The shape struct is shared with
// the CUDA twin (conv.cu), so both are called and tested the same way.
#pragma once
#include <cstddef>

namespace convoy {

struct ConvShape {
  int n = 0, c_in = 0, h_in = 0, w_in = 0;
  int c_out = 0, kh = 1, kw = 1, stride = 1, pad = 0, groups = 1;
  bool relu = false;  // a ReLU fused onto the output (applied while the image is in cache)
  int h_out() const { return (h_in + 2 * pad - kh) / stride + 1; }
  int w_out() const { return (w_in + 2 * pad - kw) / stride + 1; }
  // Weights are [c_out, c_in / groups, kh, kw].
  size_t weight_count() const { return size_t(c_out) * (c_in / groups) * kh * kw; }
  size_t in_count() const { return size_t(n) * c_in * h_in * w_in; }
  size_t out_count() const { return size_t(n) * c_out * h_out() * w_out(); }
};

// y = conv(x, w) + b (then max(0, .) with s.relu); b may be null (no bias).
void conv_forward(const ConvShape& s, const float* x, const float* w, const float* b, float* y);
// dw and db are overwritten (not accumulated); dx may be null (first layer), db null without
// bias. With s.relu, y is the forward output and dy is taken as zero where y is not positive.
void conv_backward(const ConvShape& s, const float* x, const float* w, const float* y,
                   const float* dy, float* dx, float* dw, float* db);

}  // namespace convoy
