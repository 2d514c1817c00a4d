// Max, average and global average pooling over NCHW float tensors. The shape struct is shared
// with the CUDA twin (pool.cu).
#pragma once
#include <cstddef>
#include <cstdint>

namespace convoy {

struct PoolShape {
  int n = 0, c = 0, h_in = 0, w_in = 0;
  int kh = 2, kw = 2, stride = 2, pad = 0;
  int h_out() const { return (h_in + 2 * pad - kh) / stride + 1; }
  int w_out() const { return (w_in + 2 * pad - kw) / stride + 1; }
  size_t in_count() const { return size_t(n) * c * h_in * w_in; }
  size_t out_count() const { return size_t(n) * c * h_out() * w_out(); }
};

// argmax[i] is the index (within its input plane) of the maximum that produced y[i].
void max_pool_forward(const PoolShape& s, const float* x, float* y, int32_t* argmax);
void max_pool_backward(const PoolShape& s, const float* dy, const int32_t* argmax, float* dx);
// Padding counts as zeros in the divisor (PyTorch's count_include_pad default).
void avg_pool_forward(const PoolShape& s, const float* x, float* y);
void avg_pool_backward(const PoolShape& s, const float* dy, float* dx);
// Mean over each whole plane: y[n][c] = mean(x[n][c][:][:]).
void global_avg_pool_forward(int n, int c, int hw, const float* x, float* y);
void global_avg_pool_backward(int n, int c, int hw, const float* dy, float* dx);

}  // namespace convoy
