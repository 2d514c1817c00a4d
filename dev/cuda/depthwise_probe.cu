// depthwise_probe: bf16 NHWC depthwise 3x3 convolutions at MobileNetV2's shapes: every cuDNN
// algorithm each pass offers (its reported workspace, whether it runs within it, its time), then
// convoy's own kernels (depthwise_conv.cu) with the bytes each pass must move.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "dev/cuda/cuda_timing.cuh"
#include "shared/cuda_check.h"
#include "train/cuda/gpu_context.h"
#include "train/layers/depthwise_conv.h"

namespace {

struct Shape {
  int c, h, stride;
};

struct Descs {
  cudnnTensorDescriptor_t x, y;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
};

Descs make(int n, const Shape& s) {
  Descs d{};
  const int ho = (s.h + 2 - 3) / s.stride + 1;
  CONVOY_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d.x));
  CONVOY_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d.y));
  CONVOY_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d.w));
  CONVOY_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d.conv));
  CONVOY_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d.x, CUDNN_TENSOR_NHWC, CUDNN_DATA_BFLOAT16, n, s.c, s.h, s.h));
  CONVOY_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d.y, CUDNN_TENSOR_NHWC, CUDNN_DATA_BFLOAT16, n, s.c, ho, ho));
  CONVOY_CUDNN_CHECK(cudnnSetFilter4dDescriptor(d.w, CUDNN_DATA_BFLOAT16, CUDNN_TENSOR_NHWC, s.c, 1, 3, 3));
  CONVOY_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(d.conv, 1, 1, s.stride, s.stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                                     CUDNN_DATA_FLOAT));
  CONVOY_CUDNN_CHECK(cudnnSetConvolutionGroupCount(d.conv, s.c));
  CONVOY_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, CUDNN_TENSOR_OP_MATH));
  return d;
}

// Milliseconds per call of f (5 calls after 2), or -status when the first call fails.
template <typename F>
float time_ms(F f) {
  cudnnStatus_t st = f();
  if (st != CUDNN_STATUS_SUCCESS) return -float(st);
  f();
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a);
  for (int i = 0; i < 5; ++i) f();
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  return ms / 5;
}

void probe(cudnnHandle_t h, int n, const Shape& s, void* x, void* y, void* w, void* ws, size_t ws_bytes) {
  const Descs d = make(n, s);
  const float one = 1.f, zero = 0.f;
  std::printf("n=%d c=%d h=%d stride=%d\n", n, s.c, s.h, s.stride);
  cudnnConvolutionFwdAlgoPerf_t f[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int got = 0;
  CONVOY_CUDNN_CHECK(
      cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, f));
  for (int i = 0; i < got; ++i) {
    if (f[i].status != CUDNN_STATUS_SUCCESS) continue;
    size_t q = 0;
    cudnnGetConvolutionForwardWorkspaceSize(h, d.x, d.w, d.conv, d.y, f[i].algo, &q);
    const float ms = time_ms([&] {
      return cudnnConvolutionForward(h, &one, d.x, x, d.w, w, d.conv, f[i].algo, ws, ws_bytes, &zero, d.y, y);
    });
    std::printf("  fwd   algo %d det %d mem %zu MiB query %zu MiB: %.3f ms\n", int(f[i].algo), int(f[i].determinism),
                f[i].memory >> 20, q >> 20, ms);
  }
  cudnnConvolutionBwdDataAlgoPerf_t bd[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  CONVOY_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x,
                                                                 CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, bd));
  for (int i = 0; i < got; ++i) {
    if (bd[i].status != CUDNN_STATUS_SUCCESS) continue;
    const float ms = time_ms([&] {
      return cudnnConvolutionBackwardData(h, &one, d.w, w, d.y, y, d.conv, bd[i].algo, ws, ws_bytes, &zero, d.x, x);
    });
    std::printf("  bdata algo %d det %d mem %zu MiB: %.3f ms\n", int(bd[i].algo), int(bd[i].determinism),
                bd[i].memory >> 20, ms);
  }
  cudnnConvolutionBwdFilterAlgoPerf_t bf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  CONVOY_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w,
                                                                   CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, bf));
  for (int i = 0; i < got; ++i) {
    if (bf[i].status != CUDNN_STATUS_SUCCESS) continue;
    size_t q = 0;
    cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x, d.y, d.conv, d.w, bf[i].algo, &q);
    const float ms = time_ms([&] {
      return cudnnConvolutionBackwardFilter(h, &one, d.x, x, d.y, y, d.conv, bf[i].algo, ws, ws_bytes, &zero, d.w, w);
    });
    std::printf("  bfilt algo %d det %d mem %zu MiB query %zu MiB: %.3f ms\n", int(bf[i].algo), int(bf[i].determinism),
                bf[i].memory >> 20, q >> 20, ms);
  }
  cudnnDestroyTensorDescriptor(d.x);
  cudnnDestroyTensorDescriptor(d.y);
  cudnnDestroyFilterDescriptor(d.w);
  cudnnDestroyConvolutionDescriptor(d.conv);
}

// convoy's kernels: ms per pass and GB/s of the bytes it must read and write.
void own(convoy::gpu::Context& ctx, int n, const Shape& s, void* x, void* y, void* dw) {
  using convoy::gpu::bf16;
  convoy::ConvShape cs{n, s.c, s.h, s.h, s.c, 3, 3, s.stride, 1, s.c};
  const convoy::gpu::DepthwisePlan p = convoy::gpu::plan_depthwise(cs, ctx.workspace_bytes());
  bf16 *bx = static_cast<bf16*>(x), *by = static_cast<bf16*>(y);
  const bf16* w = static_cast<const bf16*>(dw);
  const double in = double(cs.in_count()) * 2, out = double(cs.out_count()) * 2;
  const double f = convoy::bench::event_ms(
      ctx, [&] { convoy::gpu::depthwise_forward(ctx, cs, bx, w, by); }, 10, 2);
  const double d = convoy::bench::event_ms(
      ctx, [&] { convoy::gpu::depthwise_backward_data(ctx, cs, by, w, bx, false); }, 10, 2);
  float* g = reinterpret_cast<float*>(static_cast<char*>(dw) + (64 << 10));
  const double k = convoy::bench::event_ms(
      ctx, [&] { convoy::gpu::depthwise_backward_filter(ctx, cs, p, bx, by, g); }, 10, 2);
  std::printf("  own n=%d c=%d h=%d s=%d: fwd %.3f ms (%.0f GB/s) bdata %.3f (%.0f) bfilt %.3f (%.0f), %d blocks\n", n,
              s.c, s.h, s.stride, f, (in + out) / f / 1e6, d, (in + out) / d / 1e6, k, (in + out) / k / 1e6,
              p.filter_blocks);
}

}  // namespace

// depthwise_probe [workspace MiB, default 1024] [batch ...]; PROBE_CUDNN=1 for cuDNN's algorithms
// (negative times are the cuDNN status of a call that failed).
int main(int argc, char** argv) {
  const size_t ws_bytes = size_t(argc > 1 ? std::atoi(argv[1]) : 1024) << 20;
  std::vector<int> batches;
  for (int i = 2; i < argc; ++i) batches.push_back(std::atoi(argv[i]));
  if (batches.empty()) batches = {128, 256};
  const Shape shapes[] = {{32, 112, 1}, {96, 112, 2}, {144, 56, 1}, {144, 56, 2}, {192, 28, 1},
                          {192, 28, 2}, {384, 14, 1}, {576, 14, 1}, {576, 14, 2}, {960, 7, 1}};
  cudnnHandle_t h;
  CONVOY_CUDNN_CHECK(cudnnCreate(&h));
  const size_t act = size_t(256) * 96 * 112 * 112 * 2;
  void *x, *y, *w, *ws;
  CONVOY_CUDA_CHECK(cudaMalloc(&x, act));
  CONVOY_CUDA_CHECK(cudaMalloc(&y, act));
  CONVOY_CUDA_CHECK(cudaMalloc(&w, 1 << 20));
  CONVOY_CUDA_CHECK(cudaMalloc(&ws, ws_bytes));
  cudaMemset(x, 0, act);
  cudaMemset(y, 0, act);
  cudaMemset(w, 0, 1 << 20);
  const bool cudnn = std::getenv("PROBE_CUDNN") != nullptr;
  for (int n : batches)
    for (const Shape& s : shapes)
      if (cudnn) probe(h, n, s, x, y, w, ws, ws_bytes);
  cudnnDestroy(h);
  convoy::gpu::Context ctx(0, ws_bytes, convoy::gpu::MathMode::bf16);
  for (int n : batches)
    for (const Shape& s : shapes) own(ctx, n, s, x, y, w);
  return 0;
}
