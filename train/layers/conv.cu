// CUDA twin of conv.cpp: cuDNN convolution with algorithms chosen once per shape (deterministic
// ones only) and run in the context's preallocated workspace; fp32 NCHW, or bf16 NHWC with fp32
// accumulation on the tensor cores. Then the conv op's GPU passes: a plan per batch shape, and the
// bf16 weight copy's filters in cuDNN's order (padded for a first layer that reads stored channels).
#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <type_traits>
#include <vector>

#include "shared/log.h"
#include "train/cuda/channels.cuh"
#include "train/cuda/gpu_context.h"
#include "train/cuda/input_layout.h"
#include "train/cuda/weight_copy.cuh"
#include "train/layers/conv.h"
#include "train/layers/depthwise_conv.h"
#include "train/layers/gpu_layer.h"

namespace convoy::gpu {
namespace {

// dw (fp32, [c_out, c, kh, kw]) from cuDNN's bf16 filter gradient in the stored filter's order (the
// padded channels' and taps' gradients are dropped).
__global__ void widen_filter_grad(unsigned count, unsigned c, unsigned rs, unsigned c_pad, InputFold fold, unsigned k,
                                  const bf16* __restrict__ krsc, float* __restrict__ dw) {
  CONVOY_GRID_STRIDE(j, count) dw[j] = __bfloat162float(krsc[filter_index(unsigned(j), c, rs, c_pad, fold, k)]);
}

// x[n, s i, s j, :] to xs[n, i, j, :] in 16-byte packs (cp of them per pixel): the pixels a 1x1
// stride-s convolution reads, packed for a stride-1 one.
__global__ void subsample_pixels(unsigned total, int cp, int stride, int h_in, int w_in, int h_out, int w_out,
                                 const uint4* __restrict__ x, uint4* __restrict__ xs) {
  CONVOY_GRID_STRIDE(k, total) {
    const unsigned pix = unsigned(k) / cp, n = pix / (h_out * w_out), r = pix % (h_out * w_out);
    const unsigned i = r / w_out, j = r % w_out;
    xs[k] = x[((size_t(n) * h_in + stride * i) * w_in + stride * j) * cp + unsigned(k) % cp];
  }
}

// cols[q, t, :] = the 16-byte packs (cp per pixel) of input pixel (s i + ky - pad, s j + kx - pad) of
// output pixel q = (n, i, j) and tap t = ky k + kx, zero outside the input: each output pixel's
// window as one row, for the filter gradient's product.
__global__ void window_rows(unsigned total, int cp, int k, int stride, int pad, int h_in, int w_in, int h_out,
                            int w_out, const uint4* __restrict__ x, uint4* __restrict__ cols) {
  CONVOY_GRID_STRIDE(e, total) {
    const unsigned pack = unsigned(e) % cp, rest = unsigned(e) / cp, t = rest % unsigned(k * k), q = rest / (k * k);
    const unsigned n = q / (h_out * w_out), r = q % (h_out * w_out);
    const int y = int(r / w_out) * stride + int(t) / k - pad, xx = int(r % w_out) * stride + int(t) % k - pad;
    const bool in = y >= 0 && y < h_in && xx >= 0 && xx < w_in;
    cols[e] = in ? x[((size_t(n) * h_in + y) * w_in + xx) * cp + pack] : make_uint4(0, 0, 0, 0);
  }
}

// Output pixels of a convolution: the rows of its matrix product form.
int pixels_out(const ConvShape& s) {
  const long long rows = (long long)s.n * s.h_out() * s.w_out();
  if (rows > INT32_MAX) fail("a 1x1 convolution of 2^31 output pixels or more");
  return int(rows);
}

// Column-major c [m, n] = beta c + op(a) op(b), bf16 inputs summed in fp32 on the tensor cores,
// c bf16 or fp32. cuBLAS's kernels for these shapes moved the bytes of ResNet-50's 1x1
// convolutions up to a third faster than cuDNN's implicit-GEMM ones on the H200; with a fixed
// workspace and stream they sum in the same order on every run.
void gemm(Context& ctx, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const bf16* a, int lda,
          const bf16* b, int ldb, void* c, cudaDataType_t c_type, int ldc, float beta) {
  const float alpha = 1.f;
  CONVOY_CUBLAS_CHECK(cublasGemmEx(ctx.cublas(), ta, tb, m, n, k, &alpha, a, CUDA_R_16BF, lda, b, CUDA_R_16BF, ldb,
                                   &beta, c, c_type, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// The first deterministic algorithm within the workspace, from cuDNN's heuristic ranking or from
// timing each candidate (with `any`, the fastest timed one, deterministic or not). Heuristics
// sometimes rank no deterministic algorithm for a shape; timing reports every one, so it is the
// fallback. An algorithm's size is the larger of its ranking's and `size(algo)`'s: cuDNN 9 ranks
// some algorithms twice for grouped bf16 shapes, once with 0 bytes, and at run time asks for what
// its size query says (1.7 GiB for a depthwise backward-filter pass of MobileNetV2 at batch 256).
template <typename Perf, typename Heuristic, typename Measure, typename Size>
Perf choose(AlgoSearch search, Heuristic heuristic, Measure timed, Size size, int total, size_t workspace,
            const ConvShape& s, const char* what) {
  std::vector<Perf> found(total);
  const bool any = search == AlgoSearch::fastest;
  const auto fits = [&](const Perf& f) { return std::max(f.memory, size(f.algo)) <= workspace; };
  for (int pass = search == AlgoSearch::heuristic ? 0 : 1; pass < 2; ++pass) {
    int got = 0;
    if (pass == 0)
      heuristic(total, &got, found.data());
    else
      timed(total, &got, found.data());
    for (int i = 0; i < got; ++i)
      if (found[i].status == CUDNN_STATUS_SUCCESS && (any || found[i].determinism == CUDNN_DETERMINISTIC) &&
          fits(found[i]))
        return found[i];
    if (pass == 1) {
      // No deterministic algorithm at all (cuDNN 9 has none for some wide-kernel, few-channel
      // shapes): the fastest other one, said once, since the run is then not repeatable bit for bit.
      for (int i = 0; i < got; ++i)
        if (found[i].status == CUDNN_STATUS_SUCCESS && fits(found[i])) {
          log_warn(
              "cuDNN has no deterministic %s algorithm for a %dx%d convolution of %dx%dx%d to %d channels; "
              "using a non-deterministic one (runs will differ in the last bits)",
              what, s.kh, s.kw, s.c_in, s.h_in, s.w_in, s.c_out);
          return found[i];
        }
    }
  }
  fail(std::string("cuDNN offers no ") + what + " algorithm within the " + std::to_string(workspace >> 20) +
       " MiB workspace for a " + std::to_string(s.kh) + "x" + std::to_string(s.kw) + " convolution of " +
       std::to_string(s.c_in) + "x" + std::to_string(s.h_in) + "x" + std::to_string(s.w_in) + " to " +
       std::to_string(s.c_out) + " channels");
}

}  // namespace

ConvPlan::ConvPlan(Context& ctx, const ConvShape& s, bool need_dx, int c_stored, InputFold fold)
    : shape_(s), bf16_(ctx.bf16()), c_stored_(c_stored > 0 ? c_stored : s.c_in / s.groups), fold_(fold) {
  if (s.relu) fail("the CUDA convolution runs its ReLU as a separate node (ConvShape::relu must be off)");
  if (c_stored > 0 && c_stored != s.c_in && (!bf16_ || s.groups != 1 || c_stored < s.c_in))
    fail("ConvPlan: padded input channels need a bf16 plan, one group and at least c_in channels");
  const bool strided = s.stride == 2 || (fold == InputFold::patches && s.stride == 1);
  if (fold != InputFold::none && (!bf16_ || s.groups != 1 || !strided || s.kh != s.kw || need_dx ||
                                  c_stored < (fold == InputFold::blocks ? 4 : s.kh * s.kw) * s.c_in))
    fail(
        "ConvPlan: a folded input needs a bf16 plan of one group, stride 2 (patches: 1 or 2), a square kernel, "
        "no input gradient and all the fold's channels stored");
  const int cx = s.groups == 1 ? c_stored_ : s.c_in;  // channels of x as stored
  // A folded input: cuDNN sees the stored layout, a stride-1 unpadded convolution of half the kernel
  // (blocks) or 1x1 (patches).
  int xh = s.h_in, xw = s.w_in, fh = s.kh, fw = s.kw, pad = s.pad, stride = s.stride;
  if (fold != InputFold::none) {
    const InputLayout l = fold == InputFold::blocks ? space_to_depth_input(s.c_in, s.h_in, s.w_in, s.kh, s.pad)
                                                    : patches_input(s.c_in, s.h_in, s.w_in, s.kh, s.pad, s.stride);
    xh = l.h_stored, xw = l.w_stored, pad = 0, stride = 1;
    fh = fw = fold == InputFold::blocks ? (s.kh + 1) / 2 : 1;
  }
  const cudnnTensorFormat_t format = bf16_ ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  const cudnnDataType_t type = bf16_ ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
  CONVOY_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x_));
  CONVOY_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y_));
  CONVOY_CUDNN_CHECK(cudnnCreateTensorDescriptor(&bias_));
  CONVOY_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w_));
  CONVOY_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv_));
  CONVOY_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x_, format, type, s.n, cx, xh, xw));
  CONVOY_CUDNN_CHECK(cudnnSetTensor4dDescriptor(y_, format, type, s.n, s.c_out, s.h_out(), s.w_out()));
  CONVOY_CUDNN_CHECK(cudnnSetTensor4dDescriptor(bias_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, s.c_out, 1, 1));
  CONVOY_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w_, type, format, s.c_out, cx / s.groups, fh, fw));
  // The compute type is fp32 in every mode: bf16 tensors are multiplied on the tensor cores and
  // summed in fp32.
  CONVOY_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv_, pad, pad, stride, stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                                     CUDNN_DATA_FLOAT));
  CONVOY_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv_, s.groups));
  CONVOY_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_, bf16_                          ? CUDNN_TENSOR_OP_MATH
                                                        : ctx.math() == MathMode::tf32 ? CUDNN_DEFAULT_MATH
                                                                                       : CUDNN_FMA_MATH));
  int n = 0, c = 0, h = 0, w = 0;
  CONVOY_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(conv_, x_, w_, &n, &c, &h, &w));
  if (n != s.n || c != s.c_out || h != s.h_out() || w != s.w_out())
    fail("cuDNN disagrees with the convolution's output shape");
  has_dx_ = need_dx;
  gemm_ = bf16_ && s.kh == 1 && s.kw == 1 && s.pad == 0 && s.groups == 1 && fold == InputFold::none &&
          c_stored_ == s.c_in && s.c_in % 8 == 0 && s.c_out % 8 == 0;
  if (gemm_ && s.stride > 1) {
    plan_subsample(ctx);
    gemm_ = sub_bytes_ > 0;  // else cuDNN's strided kernels: the packed pixels would not fit the workspace
    // Few channels: the filter gradient is the product too (cuDNN's kernel for ResNet-20's 16-to-32
    // shortcut ran on one thread block, 92 us at batch 128 on an H200); wider ones keep cuDNN's.
    packed_filter_grad_ = gemm_ && s.c_in <= 32 && s.c_out <= 64;
  }
  if (gemm_ && s.stride == 1) return;
  // cuDNN 9.19 ran this 1x1 convolution over 152 channels in 4-5 ms a ResNet step (batch 256,
  // H200) against cuBLAS's fraction of a millisecond for the same product.
  patches_gemm_ = bf16_ && fold == InputFold::patches && c_stored_ % 8 == 0 && s.c_out % 8 == 0;
  if (bf16_ && fold == InputFold::none) {
    const DepthwisePlan dp = plan_depthwise(s, ctx.workspace_bytes());
    depthwise_ = dp.on, depthwise_blocks_ = dp.filter_blocks;
    if (depthwise_) return;
  }
  choose_algorithms(ctx, s, need_dx);
  plan_window_rows(ctx);
}

// A stride-1 convolution over few channels (c_in <= 32, c_out <= 64; Fashion-MNIST's ResNet-20)
// takes its filter gradient as one product, dw [c_out, k k c_in] = dy^T [c_out, pixels] x
// cols [pixels, k k c_in], over each output pixel's window written out at the workspace's start:
// cuDNN 9.19's filter-gradient kernels for these shapes ran 24-30 thread blocks on a 132-unit
// H200, 61-72 us a 16- or 32-channel 3x3 layer at batch 128.
void ConvPlan::plan_window_rows(Context& ctx) {
  const ConvShape& s = shape_;
  if (!bf16_ || fold_ != InputFold::none || s.groups != 1 || s.stride != 1 || c_stored_ != s.c_in || s.c_in % 8 != 0 ||
      s.c_out % 8 != 0 || s.c_in > 32 || s.c_out > 64 || s.kh != s.kw || s.kh < 2)
    return;
  const size_t row = size_t(s.kh) * s.kw * s.c_in, bytes = size_t(pixels_out(s)) * row * sizeof(bf16);
  if (bytes > ctx.workspace_bytes() / 2 || row > INT32_MAX) return;
  cols_bytes_ = bytes;
}

// cuDNN's algorithms for the passes this plan runs through it.
void ConvPlan::choose_algorithms(Context& ctx, const ConvShape& s, bool need_dx) {
  const AlgoSearch search = ctx.algo_search();
  cudnnHandle_t hd = ctx.cudnn();
  const size_t ws = ctx.workspace_bytes();
  if (!gemm_ && !patches_gemm_)
    fwd_ = choose<cudnnConvolutionFwdAlgoPerf_t>(
               search,
               [&](int n, int* got, auto* out) {
                 CONVOY_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(hd, x_, w_, conv_, y_, n, got, out));
               },
               [&](int n, int* got, auto* out) {
                 CONVOY_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithm(hd, x_, w_, conv_, y_, n, got, out));
               },
               [&](cudnnConvolutionFwdAlgo_t a) {
                 size_t b = 0;
                 CONVOY_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(hd, x_, w_, conv_, y_, a, &b));
                 return b;
               },
               CUDNN_CONVOLUTION_FWD_ALGO_COUNT, ws, s, "forward")
               .algo;
  if (need_dx)
    bwd_data_ = choose<cudnnConvolutionBwdDataAlgoPerf_t>(
                    search,
                    [&](int n, int* got, auto* out) {
                      CONVOY_CUDNN_CHECK(
                          cudnnGetConvolutionBackwardDataAlgorithm_v7(hd, w_, y_, conv_, x_, n, got, out));
                    },
                    [&](int n, int* got, auto* out) {
                      CONVOY_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithm(hd, w_, y_, conv_, x_, n, got, out));
                    },
                    [&](cudnnConvolutionBwdDataAlgo_t a) {
                      size_t b = 0;
                      CONVOY_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(hd, w_, y_, conv_, x_, a, &b));
                      return b;
                    },
                    CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, ws, s, "backward-data")
                    .algo;
  bwd_filter_ = choose<cudnnConvolutionBwdFilterAlgoPerf_t>(
                    search,
                    [&](int n, int* got, auto* out) {
                      CONVOY_CUDNN_CHECK(
                          cudnnGetConvolutionBackwardFilterAlgorithm_v7(hd, x_, y_, conv_, w_, n, got, out));
                    },
                    [&](int n, int* got, auto* out) {
                      CONVOY_CUDNN_CHECK(
                          cudnnFindConvolutionBackwardFilterAlgorithm(hd, x_, y_, conv_, w_, n, got, out));
                    },
                    [&](cudnnConvolutionBwdFilterAlgo_t a) {
                      size_t b = 0;
                      CONVOY_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(hd, x_, y_, conv_, w_, a, &b));
                      return b;
                    },
                    CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, ws, s, "backward-filter")
                    .algo;
}

// The workspace's end for a strided 1x1 convolution's packed pixels (ResNet's downsampling
// shortcuts): the forward pass packs the pixels it reads there and multiplies them as a stride-1
// one would, a plain product; the backward passes keep cuDNN's strided kernels. cuDNN's own
// strided forward was slow for some (a layout transform and a non-tensor-core GEMM for
// ResNet-18's 64 to 128 channels, 4x the time of the stride-1 kernels).
void ConvPlan::plan_subsample(Context& ctx) {
  const ConvShape& s = shape_;
  if (s.stride == 1) return;
  const size_t bytes = size_t(s.n) * s.h_out() * s.w_out() * s.c_in * sizeof(bf16);
  if (bytes > ctx.workspace_bytes() / 2 || bytes >= (size_t(16) << 32)) return;
  sub_bytes_ = (bytes + 255) / 256 * 256;
}

ConvPlan::~ConvPlan() {
  if (conv_) cudnnDestroyConvolutionDescriptor(conv_);
  if (w_) cudnnDestroyFilterDescriptor(w_);
  if (bias_) cudnnDestroyTensorDescriptor(bias_);
  if (y_) cudnnDestroyTensorDescriptor(y_);
  if (x_) cudnnDestroyTensorDescriptor(x_);
}

void conv_forward(Context& ctx, const ConvPlan& p, const float* x, const float* w, const float* b, float* y) {
  if (p.bf16_) fail("ConvPlan: a bf16 plan run on fp32 tensors");
  const float one = 1.f, zero = 0.f;
  CONVOY_CUDNN_CHECK(cudnnConvolutionForward(ctx.cudnn(), &one, p.x_, x, p.w_, w, p.conv_, p.fwd_, ctx.workspace(),
                                             ctx.workspace_bytes(), &zero, p.y_, y));
  if (b) CONVOY_CUDNN_CHECK(cudnnAddTensor(ctx.cudnn(), &one, p.bias_, b, &one, p.y_, y));
}

void conv_backward(Context& ctx, const ConvPlan& p, const float* x, const float* w, const float* dy, float* dx,
                   float* dw, float* db, bool dx_add) {
  if (p.bf16_) fail("ConvPlan: a bf16 plan run on fp32 tensors");
  const float one = 1.f, zero = 0.f;
  if (db) CONVOY_CUDNN_CHECK(cudnnConvolutionBackwardBias(ctx.cudnn(), &one, p.y_, dy, &zero, p.bias_, db));
  CONVOY_CUDNN_CHECK(cudnnConvolutionBackwardFilter(ctx.cudnn(), &one, p.x_, x, p.y_, dy, p.conv_, p.bwd_filter_,
                                                    ctx.workspace(), ctx.workspace_bytes(), &zero, p.w_, dw));
  if (dx && !p.has_dx_) fail("ConvPlan: built without the input gradient, which is now asked for");
  if (dx)
    CONVOY_CUDNN_CHECK(cudnnConvolutionBackwardData(ctx.cudnn(), &one, p.w_, w, p.y_, dy, p.conv_, p.bwd_data_,
                                                    ctx.workspace(), ctx.workspace_bytes(), dx_add ? &one : &zero, p.x_,
                                                    dx));
}

namespace {

// A strided 1x1 convolution's input pixels, packed at the workspace's end (ConvPlan::sub_bytes_);
// x itself where the plan packs none.
const bf16* packed_pixels(Context& ctx, const ConvPlan& p, const bf16* x) {
  if (!p.sub_bytes_) return x;
  const ConvShape& s = p.shape_;
  bf16* packed = reinterpret_cast<bf16*>(static_cast<char*>(ctx.workspace()) + ctx.workspace_bytes() - p.sub_bytes_);
  const int cp = s.c_in / 8;
  const size_t total = size_t(s.n) * s.h_out() * s.w_out() * cp;
  subsample_pixels<<<grid_for(total), 256, 0, ctx.stream()>>>(unsigned(total), cp, s.stride, s.h_in, s.w_in, s.h_out(),
                                                              s.w_out(), reinterpret_cast<const uint4*>(x),
                                                              reinterpret_cast<uint4*>(packed));
  CONVOY_CUDA_CHECK_LAUNCH();
  return packed;
}

// dw_scratch [c_out, k, k, c_in] (bf16, cuDNN's filter order) = dy^T cols, cols being each output
// pixel's window as a row (ConvPlan::plan_window_rows).
void window_filter_grad(Context& ctx, const ConvPlan& p, const bf16* x, const bf16* dy, bf16* dw_scratch) {
  const ConvShape& s = p.shape_;
  bf16* cols = static_cast<bf16*>(ctx.workspace());
  const int cp = s.c_in / 8, row = s.kh * s.kw * s.c_in;
  const size_t total = size_t(pixels_out(s)) * s.kh * s.kw * cp;
  window_rows<<<grid_for(total), 256, 0, ctx.stream()>>>(unsigned(total), cp, s.kh, s.stride, s.pad, s.h_in, s.w_in,
                                                         s.h_out(), s.w_out(), reinterpret_cast<const uint4*>(x),
                                                         reinterpret_cast<uint4*>(cols));
  CONVOY_CUDA_CHECK_LAUNCH();
  // Column-major dw^T [k k c_in, c_out] = cols^T(as stored) dy.
  gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_T, row, s.c_out, pixels_out(s), cols, row, dy, s.c_out, dw_scratch, CUDA_R_16BF, row,
       0.f);
}

}  // namespace

// bf16: cuDNN's NHWC bias addition is slow, so an own pass adds the fp32 bias to the rounded output,
// and another sums its gradient in fp32.
void conv_forward(Context& ctx, const ConvPlan& p, const bf16* x, const bf16* w, const float* b, bf16* y) {
  if (!p.bf16_) fail("ConvPlan: an fp32 plan run on bf16 tensors");
  const ConvShape& s = p.shape_;
  const float one = 1.f, zero = 0.f;
  if (p.gemm_ || p.patches_gemm_) {
    const bf16* xs = packed_pixels(ctx, p, x);
    // y [pixels, c_out] = x [pixels, k] w^T, row-major: column-major y^T = w^T(as stored) x^T, over
    // the c_in channels or the stored windows' c_stored.
    const int k = p.patches_gemm_ ? p.c_stored_ : s.c_in;
    gemm(ctx, CUBLAS_OP_T, CUBLAS_OP_N, s.c_out, pixels_out(s), k, w, k, xs, k, y, CUDA_R_16BF, s.c_out, 0.f);
  } else if (p.depthwise_) {
    depthwise_forward(ctx, s, x, w, y);
  } else {
    CONVOY_CUDNN_CHECK(cudnnConvolutionForward(ctx.cudnn(), &one, p.x_, x, p.w_, w, p.conv_, p.fwd_, ctx.workspace(),
                                               ctx.workspace_bytes(), &zero, p.y_, y));
  }
  if (b) channels::add_channel_bias(ctx, (long long)s.n * s.h_out() * s.w_out(), s.c_out, b, y);
}

void conv_backward(Context& ctx, const ConvPlan& p, const bf16* x, const bf16* w, const bf16* dy, bf16* dx, float* dw,
                   float* db, bf16* dw_scratch, bool dx_add) {
  if (!p.bf16_) fail("ConvPlan: an fp32 plan run on bf16 tensors");
  const ConvShape& s = p.shape_;
  const float one = 1.f, zero = 0.f;
  if (db) channels::channel_bias_grad(ctx, (long long)s.n * s.h_out() * s.w_out(), s.c_out, dy, db);
  if (dx && !p.has_dx_) fail("ConvPlan: built without the input gradient, which is now asked for");
  if (p.gemm_ && s.stride == 1) {
    // dw [c_out, c_in] = dy^T x, in fp32 straight from the product: column-major dw^T = x^T dy.
    gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_T, s.c_in, s.c_out, pixels_out(s), x, s.c_in, dy, s.c_out, dw, CUDA_R_32F, s.c_in,
         0.f);
    // dx [pixels, c_in] = dy w: column-major dx^T = w^T(as stored) dy^T.
    if (dx)
      gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_N, s.c_in, pixels_out(s), s.c_out, w, s.c_in, dy, s.c_out, dx, CUDA_R_16BF,
           s.c_in, dx_add ? 1.f : 0.f);
    return;
  }
  if (p.depthwise_) {
    depthwise_backward_filter(ctx, s, DepthwisePlan{true, p.depthwise_blocks_}, x, dy, dw);
    if (dx) depthwise_backward_data(ctx, s, dy, w, dx, dx_add);
    return;
  }
  if (p.packed_filter_grad_) {
    // Strided 1x1: dw from the pixels the forward pass read, packed again; dx stays cuDNN's.
    gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_T, s.c_in, s.c_out, pixels_out(s), packed_pixels(ctx, p, x), s.c_in, dy, s.c_out,
         dw, CUDA_R_32F, s.c_in, 0.f);
  } else if (p.cols_bytes_) {
    window_filter_grad(ctx, p, x, dy, dw_scratch);
  } else {
    CONVOY_CUDNN_CHECK(cudnnConvolutionBackwardFilter(ctx.cudnn(), &one, p.x_, x, p.y_, dy, p.conv_, p.bwd_filter_,
                                                      ctx.workspace(), ctx.workspace_bytes(), &zero, p.w_, dw_scratch));
  }
  if (dx)
    CONVOY_CUDNN_CHECK(cudnnConvolutionBackwardData(ctx.cudnn(), &one, p.w_, w, p.y_, dy, p.conv_, p.bwd_data_,
                                                    ctx.workspace(), ctx.workspace_bytes(), dx_add ? &one : &zero, p.x_,
                                                    dx));
  if (p.packed_filter_grad_) return;  // dw is written
  const size_t count = s.weight_count();
  widen_filter_grad<<<grid_for(count), 256, 0, ctx.stream()>>>(unsigned(count), unsigned(s.c_in / s.groups),
                                                               unsigned(s.kh * s.kw), unsigned(p.c_stored_), p.fold_,
                                                               unsigned(s.kh), dw_scratch, dw);
  CONVOY_CUDA_CHECK_LAUNCH();
}

}  // namespace convoy::gpu

namespace convoy {
namespace {

using gpu::as;
using gpu::bf16;
using gpu::GpuLayer;

// A node's plans, one per batch size and input height and width ([data] progressive trains at
// smaller inputs than it evaluates at), made the first time a batch of that shape comes.
struct ConvPlans final : gpu::OpCache {
  std::map<std::array<int, 3>, std::unique_ptr<gpu::ConvPlan>> by_shape;
};

const gpu::ConvPlan& plan_for(const GpuLayer& l) {
  if (!l.cache) l.cache = std::make_unique<ConvPlans>();
  auto& plans = static_cast<ConvPlans&>(*l.cache).by_shape;
  const std::array<int, 3> key{l.n(), l.in().h, l.in().w};
  auto it = plans.find(key);
  if (it != plans.end()) return *it->second;
  const bool first = l.node.in[0] < 0;
  auto p = std::make_unique<gpu::ConvPlan>(l.ctx, conv_shape(l.node, l.n()), !first, first ? l.input.c_stored : 0,
                                           first ? l.input.fold : InputFold::none);
  return *plans.emplace(key, std::move(p)).first->second;
}

template <typename T>
void conv_fwd(const GpuLayer& l) {
  gpu::conv_forward(l.ctx, plan_for(l), l.xs<T>(), l.weights<T>(), l.b, as<T>(l.buf.y));
}

template <typename T>
void conv_bwd(const GpuLayer& l) {
  const T* dy = as<T>(l.buf.dy);
  if constexpr (std::is_same_v<T, bf16>)
    gpu::conv_backward(l.ctx, plan_for(l), l.xs<T>(), l.weights<T>(), dy, l.grad_to<T>(), l.dw, l.db, l.dw16, l.dx_add);
  else
    gpu::conv_backward(l.ctx, plan_for(l), l.xs<T>(), l.weights<T>(), dy, l.grad_to<T>(), l.dw, l.db, l.dx_add);
}

}  // namespace

gpu::InputUse ConvOp::input_use(const Node& nd) const {
  const ConvParams& p = params_of<ConvParams>(nd.spec);
  return {p.groups == 1, (p.stride == 1 || p.stride == 2) && p.kernel >= 2 ? p.kernel : 0, p.pad, p.stride};
}

// bf16: the copy holds the filters in cuDNN's [c_out, kh, kw, c] order; the first layer's, when the
// input is stored padded or as 2x2 blocks, go after the flat weights, padded to match.
void ConvOp::gpu_setup(gpu::GpuSetup& s) const {
  if (!s.half) return;
  const Node& nd = s.node;
  const ConvParams& p = params_of<ConvParams>(nd.spec);
  const Dims in = nd.in_dims[0];
  const int c = in.c / p.groups, rs = p.kernel * p.kernel;
  if (nd.w_count >= (size_t(1) << 32)) fail("GpuNet: a convolution with 2^32 weights or more");
  const InputFold fold = s.input.fold;
  if (nd.in[0] < 0 && (s.input.c_stored != in.c || fold != InputFold::none)) {
    const int kb = (p.kernel + 1) / 2;
    const int taps = fold == InputFold::blocks ? kb * kb : fold == InputFold::patches ? 1 : rs;
    const size_t padded = size_t(p.filters) * taps * size_t(s.input.c_stored);
    s.segments.push_back({nd.w_off, nd.w_off + nd.w_count, c, rs, s.copy_size, s.input.c_stored, fold, p.kernel});
    s.copy_at = s.copy_size;
    s.copy_size += padded;
    s.dw16 = std::max(s.dw16, padded);
  } else {
    if (c > 1 && rs > 1) s.segments.push_back({nd.w_off, nd.w_off + nd.w_count, c, rs, nd.w_off, c});
    s.dw16 = std::max(s.dw16, nd.w_count);
  }
}

void ConvOp::gpu_forward(const GpuLayer& l) const { l.half ? conv_fwd<bf16>(l) : conv_fwd<float>(l); }

void ConvOp::gpu_backward(const GpuLayer& l, int) const { l.half ? conv_bwd<bf16>(l) : conv_bwd<float>(l); }

}  // namespace convoy
