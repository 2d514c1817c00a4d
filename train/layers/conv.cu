// CUDA twin of conv.cpp: cuDNN convolution with algorithms chosen once per shape (deterministic
// ones only) and run in the context's preallocated workspace.
#include <vector>

#include "train/layers/gpu_ops.h"

namespace convoy::gpu {
namespace {

template <typename Perf>
Perf pick(const std::vector<Perf>& found, int count, size_t workspace, const char* what) {
  for (int i = 0; i < count; ++i)
    if (found[i].status == CUDNN_STATUS_SUCCESS && found[i].determinism == CUDNN_DETERMINISTIC &&
        found[i].memory <= workspace)
      return found[i];
  fail(std::string("cuDNN offers no deterministic ") + what + " algorithm within the " +
       std::to_string(workspace >> 20) + " MiB workspace");
}

}  // namespace

ConvPlan::ConvPlan(Context& ctx, const ConvShape& s) : shape_(s) {
  if (s.relu) fail("the CUDA convolution runs its ReLU as a separate node (ConvShape::relu must be off)");
  CONVOY_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x_));
  CONVOY_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y_));
  CONVOY_CUDNN_CHECK(cudnnCreateTensorDescriptor(&bias_));
  CONVOY_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w_));
  CONVOY_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv_));
  CONVOY_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, s.n, s.c_in, s.h_in, s.w_in));
  CONVOY_CUDNN_CHECK(cudnnSetTensor4dDescriptor(y_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, s.n, s.c_out, s.h_out(), s.w_out()));
  CONVOY_CUDNN_CHECK(cudnnSetTensor4dDescriptor(bias_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, s.c_out, 1, 1));
  CONVOY_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, s.c_out, s.c_in / s.groups, s.kh, s.kw));
  CONVOY_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv_, s.pad, s.pad, s.stride, s.stride, 1, 1,
                                                     CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  CONVOY_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv_, s.groups));
  CONVOY_CUDNN_CHECK(cudnnSetConvolutionMathType(
      conv_, ctx.math() == MathMode::tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
  int n = 0, c = 0, h = 0, w = 0;
  CONVOY_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(conv_, x_, w_, &n, &c, &h, &w));
  if (n != s.n || c != s.c_out || h != s.h_out() || w != s.w_out())
    fail("cuDNN disagrees with the convolution's output shape");

  const int kMax = 16;
  int got = 0;
  std::vector<cudnnConvolutionFwdAlgoPerf_t> f(kMax);
  CONVOY_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(ctx.cudnn(), x_, w_, conv_, y_, kMax, &got, f.data()));
  fwd_ = pick(f, got, ctx.workspace_bytes(), "forward").algo;
  std::vector<cudnnConvolutionBwdDataAlgoPerf_t> d(kMax);
  CONVOY_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(ctx.cudnn(), w_, y_, conv_, x_, kMax, &got, d.data()));
  bwd_data_ = pick(d, got, ctx.workspace_bytes(), "backward-data").algo;
  std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> g(kMax);
  CONVOY_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(ctx.cudnn(), x_, y_, conv_, w_, kMax, &got, g.data()));
  bwd_filter_ = pick(g, got, ctx.workspace_bytes(), "backward-filter").algo;
}

ConvPlan::~ConvPlan() {
  if (conv_) cudnnDestroyConvolutionDescriptor(conv_);
  if (w_) cudnnDestroyFilterDescriptor(w_);
  if (bias_) cudnnDestroyTensorDescriptor(bias_);
  if (y_) cudnnDestroyTensorDescriptor(y_);
  if (x_) cudnnDestroyTensorDescriptor(x_);
}

void conv_forward(Context& ctx, const ConvPlan& p, const float* x, const float* w, const float* b, float* y) {
  const float one = 1.f, zero = 0.f;
  CONVOY_CUDNN_CHECK(cudnnConvolutionForward(ctx.cudnn(), &one, p.x_, x, p.w_, w, p.conv_, p.fwd_,
                                             ctx.workspace(), ctx.workspace_bytes(), &zero, p.y_, y));
  if (b) CONVOY_CUDNN_CHECK(cudnnAddTensor(ctx.cudnn(), &one, p.bias_, b, &one, p.y_, y));
}

void conv_backward(Context& ctx, const ConvPlan& p, const float* x, const float* w, const float* dy,
                   float* dx, float* dw, float* db) {
  const float one = 1.f, zero = 0.f;
  if (db) CONVOY_CUDNN_CHECK(cudnnConvolutionBackwardBias(ctx.cudnn(), &one, p.y_, dy, &zero, p.bias_, db));
  CONVOY_CUDNN_CHECK(cudnnConvolutionBackwardFilter(ctx.cudnn(), &one, p.x_, x, p.y_, dy, p.conv_, p.bwd_filter_,
                                                    ctx.workspace(), ctx.workspace_bytes(), &zero, p.w_, dw));
  if (dx)
    CONVOY_CUDNN_CHECK(cudnnConvolutionBackwardData(ctx.cudnn(), &one, p.w_, w, p.y_, dy, p.conv_, p.bwd_data_,
                                                    ctx.workspace(), ctx.workspace_bytes(), &zero, p.x_, dx));
}

}  // namespace convoy::gpu
