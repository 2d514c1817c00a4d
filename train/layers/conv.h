// The conv op (`type = "conv"`): the CPU reference over NCHW float tensors (im2col + sgemm,
// conv.cpp) and its CUDA twin through cuDNN (conv.cu), called and tested with the same shape struct.
#pragma once
#include <cstddef>

#include "train/input_fold.h"
#include "train/layers/op.h"

#if CONVOY_HAVE_CUDA
#include <cudnn.h>

#include "train/cuda/storage.h"
#endif

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
void conv_backward(const ConvShape& s, const float* x, const float* w, const float* y, const float* dy, float* dx,
                   float* dw, float* db);

struct ConvParams : OpParams {
  int filters = 0, kernel = 3, stride = 1, pad = 0, groups = 1;
  bool bias = true;
};

// A conv node's op shape for a batch of n (without the fused ReLU), for the CPU and the GPU alike.
ConvShape conv_shape(const Node& nd, int n);

class ConvOp final : public Op {
 public:
  const char* type() const override { return "conv"; }
  std::vector<std::string> keys() const override;
  std::shared_ptr<const OpParams> parse(const LayerKeys& k) const override;
  std::string example() const override;
  OpFusion fusion(const Node& nd) const override;
  OpShape shape(const ShapeIn& in) const override;
  double forward(const CpuLayer& l) const override;
  void backward(const CpuLayer& l, int k) const override;
#if CONVOY_HAVE_CUDA
  gpu::InputUse input_use(const Node& nd) const override;
  void gpu_setup(gpu::GpuSetup& s) const override;
  void gpu_forward(const gpu::GpuLayer& l) const override;
  void gpu_backward(const gpu::GpuLayer& l, int k) const override;
#endif
};
const Op& conv_op();

}  // namespace convoy

#if CONVOY_HAVE_CUDA
namespace convoy::gpu {

class Context;

// cuDNN descriptors and algorithms for one convolution shape, chosen once at set-up. Only
// deterministic algorithms are used, so a run's weights do not depend on scheduling. In a
// MathMode::bf16 context the tensors are bf16 NHWC, the filter bf16 [c_out, kh, kw, c_in / groups]
// and the accumulation fp32.
class ConvPlan {
 public:
  // need_dx: whether the input's gradient is ever asked for (not for the net's first layer).
  // c_stored (bf16 only, groups 1): x holds that many channels per pixel, shape.c_in real ones and
  // zeros after them, and w is [c_out, kh, kw, c_stored] with zero weights there too. cuDNN's
  // NHWC tensor-core kernels want whole 16-byte pixels; 3-channel images padded to 8 run the
  // first convolution several times faster than 3 channels do.
  // fold (with c_stored, stride 2, no input gradient): x is stored folded (InputLayout) and w as
  // [c_out, ceil(k/2), ceil(k/2), c_stored] (blocks) or [c_out, 1, 1, c_stored] (patches), see
  // filter_index in weight_copy.cuh.
  ConvPlan(Context& ctx, const ConvShape& shape, bool need_dx = true, int c_stored = 0,
           InputFold fold = InputFold::none);
  ~ConvPlan();
  ConvPlan(const ConvPlan&) = delete;
  ConvPlan& operator=(const ConvPlan&) = delete;
  const ConvShape& shape() const { return shape_; }

  ConvShape shape_;
  cudnnTensorDescriptor_t x_ = nullptr, y_ = nullptr, bias_ = nullptr;
  cudnnFilterDescriptor_t w_ = nullptr;
  cudnnConvolutionDescriptor_t conv_ = nullptr;
  cudnnConvolutionFwdAlgo_t fwd_{};
  cudnnConvolutionBwdDataAlgo_t bwd_data_{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter_{};
  bool has_dx_ = true;
  bool bf16_ = false;
  int c_stored_ = 0;                  // channels per pixel of x and w as stored (shape_.c_in / groups unless padded)
  InputFold fold_ = InputFold::none;  // how x is folded for this first convolution
  // bf16 1x1 convolutions of one group on unpadded input are matrix products over the pixels,
  // [pixels, c_in] x [c_in, c_out], run through cuBLAS (see conv.cu); of stride > 1, the forward
  // pass first packs the pixels it reads (sub_bytes_ at the workspace's end), and so does the
  // filter gradient's where the channels are few.
  bool gemm_ = false;
  size_t sub_bytes_ = 0;
  bool packed_filter_grad_ = false;  // strided, few channels: the filter gradient over the packed pixels too
  // fold patches: the forward pass is the same product over the stored windows, [pixels, c_stored]
  // x [c_stored, c_out], through cuBLAS; the filter gradient stays cuDNN's.
  bool patches_gemm_ = false;
  // > 0: the filter gradient is one cuBLAS product over each output pixel's window, written as a row
  // at the workspace's start (this many bytes; few-channel stride-1 convolutions, see conv.cu).
  size_t cols_bytes_ = 0;
  // bf16 depthwise 3x3 and 5x5 convolutions run own kernels (depthwise_conv.cu), not cuDNN's.
  bool depthwise_ = false;
  int depthwise_blocks_ = 0;  // the filter gradient's first-pass blocks (DepthwisePlan)

 private:
  void plan_subsample(Context& ctx);
  void plan_window_rows(Context& ctx);
  void choose_algorithms(Context& ctx, const ConvShape& s, bool need_dx);
};

// The CUDA twin computes conv and ReLU as separate nodes: a ConvShape with relu set is refused.
void conv_forward(Context& ctx, const ConvPlan& plan, const float* x, const float* w, const float* b, float* y);
// With dx_add the input gradient is added to what dx holds (cuDNN's beta = 1), not written.
void conv_backward(Context& ctx, const ConvPlan& plan, const float* x, const float* w, const float* dy, float* dx,
                   float* dw, float* db, bool dx_add = false);
// bf16 plans: x, y, dx, dy bf16 NHWC; w the bf16 weight copy (see WeightCopy); the bias b and the
// gradients dw (in the CPU's [c_out, c_in / groups, kh, kw] order) and db fp32. dw_scratch holds
// weight_count() bf16 values (cuDNN's filter gradient, before it is widened and reordered into dw;
// a product through cuBLAS writes dw in fp32 directly).
void conv_forward(Context& ctx, const ConvPlan& plan, const bf16* x, const bf16* w, const float* b, bf16* y);
void conv_backward(Context& ctx, const ConvPlan& plan, const bf16* x, const bf16* w, const bf16* dy, bf16* dx,
                   float* dw, float* db, bf16* dw_scratch, bool dx_add = false);

}  // namespace convoy::gpu
#endif
