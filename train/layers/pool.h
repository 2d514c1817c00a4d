// Max, average and global average pooling: the CPU reference over NCHW float tensors (pool.cpp)
// and its CUDA twin for fp32 or bf16 elements in NCHW or NHWC (pool.cu), with one shape struct.
#pragma once
#include <cstddef>
#include <cstdint>

#if CONVOY_HAVE_CUDA
#include "train/cuda/storage.h"
#endif

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

#if CONVOY_HAVE_CUDA
namespace convoy::gpu {

class Context;

template <typename T>
void max_pool_forward(Context& ctx, const PoolShape& s, const T* x, T* y, int32_t* argmax,
                      Layout layout = Layout::nchw);
template <typename T>
void max_pool_backward(Context& ctx, const PoolShape& s, const T* dy, const int32_t* argmax, T* dx,
                       Layout layout = Layout::nchw);
template <typename T>
void avg_pool_forward(Context& ctx, const PoolShape& s, const T* x, T* y, Layout layout = Layout::nchw);
template <typename T>
void avg_pool_backward(Context& ctx, const PoolShape& s, const T* dy, T* dx, Layout layout = Layout::nchw);
template <typename T>
void global_avg_pool_forward(Context& ctx, int n, int c, int hw, const T* x, T* y, Layout layout = Layout::nchw);
template <typename T>
void global_avg_pool_backward(Context& ctx, int n, int c, int hw, const T* dy, T* dx, Layout layout = Layout::nchw);

}  // namespace convoy::gpu
#endif
