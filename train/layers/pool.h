// The pooling ops (`type = "max_pool"`, "avg_pool", "global_avg_pool"): the CPU reference over
// NCHW float tensors (pool.cpp) and its CUDA twin for fp32 or bf16 in NCHW or NHWC (pool.cu).
#pragma once
#include <cstddef>
#include <cstdint>

#include "train/layers/op.h"

#if CONVOY_HAVE_CUDA
#include "train/cuda/channel_affine.h"
#include "train/cuda/storage.h"
#endif

namespace convoy {

// ceil: the output sides rounded up (PyTorch's ceil_mode), keeping only windows that start inside
// the input or its left padding; max pooling only (average pooling's divisor would then change).
struct PoolShape {
  int n = 0, c = 0, h_in = 0, w_in = 0;
  int kh = 2, kw = 2, stride = 2, pad = 0;
  bool ceil = false;
  static int out_side(int in, int k, int stride, int pad, bool ceil) {
    const int o = (in + 2 * pad - k + (ceil ? stride - 1 : 0)) / stride + 1;
    return ceil && (o - 1) * stride >= in + pad ? o - 1 : o;
  }
  int h_out() const { return out_side(h_in, kh, stride, pad, ceil); }
  int w_out() const { return out_side(w_in, kw, stride, pad, ceil); }
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

struct PoolParams : OpParams {
  int kernel = 2, stride = 2, pad = 0;
  bool ceil_mode = false;  // max_pool only
};

// A max or average pool node's op shape for a batch of n.
PoolShape pool_shape(const Node& nd, int n);
// Whether bf16 max pooling of this shape can take its input as a deferred batch norm's scale and
// shift with its ReLU (OpFusion::takes_channel_affine_relu): its channels in whole 16-byte packs.
inline bool max_pool_takes_affine(const PoolShape& s) { return s.c % kBf16ChannelPack == 0; }

// Max and average pooling over kernel x kernel windows: the keys and the shape rule they share.
class WindowPoolOp : public Op {
 public:
  std::vector<std::string> keys() const override { return {"kernel", "stride", "pad"}; }
  std::shared_ptr<const OpParams> parse(const LayerKeys& k) const override;
  OpShape shape(const ShapeIn& in) const override;

 protected:
  static std::shared_ptr<PoolParams> read_window(const LayerKeys& k);
};

class MaxPoolOp final : public WindowPoolOp {
 public:
  const char* type() const override { return "max_pool"; }
  std::vector<std::string> keys() const override { return {"kernel", "stride", "pad", "ceil_mode"}; }
  std::shared_ptr<const OpParams> parse(const LayerKeys& k) const override;
  std::string example() const override { return "kernel = 3\nstride = 2\npad = 1\nceil_mode = true\n"; }
  CpuBuffers cpu_buffers(const Node& nd, int n) const override;
  double forward(const CpuLayer& l) const override;
  void backward(const CpuLayer& l, int k) const override;
  OpFusion fusion(const Node& nd) const override;
#if CONVOY_HAVE_CUDA
  void gpu_setup(gpu::GpuSetup& s) const override;
  void gpu_forward(const gpu::GpuLayer& l) const override;
  void gpu_backward(const gpu::GpuLayer& l, int k) const override;
#endif
};

class AvgPoolOp final : public WindowPoolOp {
 public:
  const char* type() const override { return "avg_pool"; }
  std::string example() const override { return "kernel = 2\n"; }
  double forward(const CpuLayer& l) const override;
  void backward(const CpuLayer& l, int k) const override;
#if CONVOY_HAVE_CUDA
  void gpu_forward(const gpu::GpuLayer& l) const override;
  void gpu_backward(const gpu::GpuLayer& l, int k) const override;
#endif
};

class GlobalAvgPoolOp final : public Op {
 public:
  const char* type() const override { return "global_avg_pool"; }
  OpShape shape(const ShapeIn& in) const override;
  double forward(const CpuLayer& l) const override;
  void backward(const CpuLayer& l, int k) const override;
#if CONVOY_HAVE_CUDA
  void gpu_forward(const gpu::GpuLayer& l) const override;
  void gpu_backward(const gpu::GpuLayer& l, int k) const override;
#endif
};

const Op& max_pool_op();
const Op& avg_pool_op();
const Op& global_avg_pool_op();

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
// bf16 NHWC, x a batch norm's output left as a ChannelAffine (with its ReLU or not): the same y
// and, but where a ReLU clipped the whole window (argmax -1, no gradient), the same argmax as
// pooling the stored output. For shapes of max_pool_takes_affine only.
void max_pool_forward(Context& ctx, const PoolShape& s, const ChannelAffine& x, bf16* y, int32_t* argmax);
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
