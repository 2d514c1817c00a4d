// CUDA twin of fc.cpp: cuBLAS products on row-major buffers (read by cuBLAS as their column-major
// transposes), with small kernels for the bias and its gradient. fp32 nets multiply with sgemm;
// bf16 nets with cublasGemmEx on bf16 inputs, summed in fp32, the weight gradient stored in fp32.
// Then the fc op's GPU passes: a bf16 fc on a spatial input reorders it to the CPU's NCHW order.
#include <algorithm>
#include <type_traits>

#include "train/cuda/channels.cuh"
#include "train/cuda/gpu_context.h"
#include "train/cuda/layout_convert.h"
#include "train/layers/fc.h"
#include "train/layers/gpu_layer.h"

namespace convoy::gpu {
namespace {

// db[o] = sum over samples of dy[s][o]; one thread per output, summed in sample order.
__global__ void bias_grad(int n, int out, const float* __restrict__ dy, float* __restrict__ db) {
  const int o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= out) return;
  float sum = 0.f;
  for (int s = 0; s < n; ++s) sum += dy[size_t(s) * out + o];
  db[o] = sum;
}

template <typename T>
constexpr cudaDataType_t cuda_type() {
  return std::is_same_v<T, float> ? CUDA_R_32F : CUDA_R_16BF;
}

}  // namespace

void fc_forward(Context& ctx, const FcShape& s, const float* x, const float* w, const float* b, float* y) {
  const float one = 1.f, zero = 0.f;
  // y^T (out x n) = w (out x in) . x^T (in x n), in cuBLAS's column-major view.
  CONVOY_CUBLAS_CHECK(
      cublasSgemm(ctx.cublas(), CUBLAS_OP_T, CUBLAS_OP_N, s.out, s.n, s.in, &one, w, s.in, x, s.in, &zero, y, s.out));
  if (b) channels::add_channel_bias(ctx, s.n, s.out, b, y);
}

void fc_backward(Context& ctx, const FcShape& s, const float* x, const float* w, const float* dy, float* dx, float* dw,
                 float* db) {
  const float one = 1.f, zero = 0.f;
  // dw (out x in, row-major) = dy^T . x
  CONVOY_CUBLAS_CHECK(
      cublasSgemm(ctx.cublas(), CUBLAS_OP_N, CUBLAS_OP_T, s.in, s.out, s.n, &one, x, s.in, dy, s.out, &zero, dw, s.in));
  // dx (n x in, row-major) = dy . w
  if (dx)
    CONVOY_CUBLAS_CHECK(cublasSgemm(ctx.cublas(), CUBLAS_OP_N, CUBLAS_OP_N, s.in, s.n, s.out, &one, w, s.in, dy, s.out,
                                    &zero, dx, s.in));
  if (db) {
    bias_grad<<<(s.out + 255) / 256, 256, 0, ctx.stream()>>>(s.n, s.out, dy, db);
    CONVOY_CUDA_CHECK_LAUNCH();
  }
}

template <typename Out>
void fc_forward(Context& ctx, const FcShape& s, const bf16* x, const bf16* w, const float* b, Out* y) {
  const float one = 1.f, zero = 0.f;
  CONVOY_CUBLAS_CHECK(cublasGemmEx(ctx.cublas(), CUBLAS_OP_T, CUBLAS_OP_N, s.out, s.n, s.in, &one, w, CUDA_R_16BF, s.in,
                                   x, CUDA_R_16BF, s.in, &zero, y, cuda_type<Out>(), s.out, CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT));
  if (b) channels::add_channel_bias(ctx, s.n, s.out, b, y);
}

template <typename G>
void fc_backward(Context& ctx, const FcShape& s, const bf16* x, const bf16* w, const G* dy, bf16* dx, float* dw,
                 float* db, bf16* dy_scratch) {
  const float one = 1.f, zero = 0.f;
  const bf16* g = nullptr;
  if constexpr (std::is_same_v<G, float>) {
    round_to_bf16(ctx, size_t(s.n) * s.out, dy, dy_scratch);
    g = dy_scratch;
  } else {
    g = dy;
  }
  CONVOY_CUBLAS_CHECK(cublasGemmEx(ctx.cublas(), CUBLAS_OP_N, CUBLAS_OP_T, s.in, s.out, s.n, &one, x, CUDA_R_16BF, s.in,
                                   g, CUDA_R_16BF, s.out, &zero, dw, CUDA_R_32F, s.in, CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT));
  if (dx)
    CONVOY_CUBLAS_CHECK(cublasGemmEx(ctx.cublas(), CUBLAS_OP_N, CUBLAS_OP_N, s.in, s.n, s.out, &one, w, CUDA_R_16BF,
                                     s.in, g, CUDA_R_16BF, s.out, &zero, dx, CUDA_R_16BF, s.in, CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT));
  if (db) channels::channel_bias_grad(ctx, s.n, s.out, dy, db);  // from the unrounded gradient
}

template void fc_forward<float>(Context&, const FcShape&, const bf16*, const bf16*, const float*, float*);
template void fc_forward<bf16>(Context&, const FcShape&, const bf16*, const bf16*, const float*, bf16*);
template void fc_backward<float>(Context&, const FcShape&, const bf16*, const bf16*, const float*, bf16*, float*,
                                 float*, bf16*);
template void fc_backward<bf16>(Context&, const FcShape&, const bf16*, const bf16*, const bf16*, bf16*, float*, float*,
                                bf16*);

}  // namespace convoy::gpu

namespace convoy {
namespace {

using gpu::as;
using gpu::bf16;
using gpu::GpuLayer;

// A bf16 fc on a spatial input multiplies it in NCHW order, so that its weights keep the CPU's layout.
bool reorders(bool half, Dims in) { return half && in.h * in.w > 1 && in.c > 1; }

template <typename T>
void fc_fwd(const GpuLayer& l) {
  const Dims in = l.in();
  const FcShape s{l.n(), int(in.size()), l.node.out.c};
  const T* x = l.xs<T>();
  if (reorders(l.half, in)) {
    gpu::nhwc_to_nchw(l.ctx, l.n(), in.c, in.h * in.w, x, as<T>(l.buf.aux));
    x = as<T>(l.buf.aux);
  }
  if (l.buf.fp32)
    gpu::fc_forward(l.ctx, s, x, l.weights<T>(), l.b, as<float>(l.buf.y));
  else
    gpu::fc_forward(l.ctx, s, x, l.weights<T>(), l.b, as<T>(l.buf.y));
}

void fc_bwd_bf16(const GpuLayer& l) {
  const Dims in = l.in();
  const FcShape s{l.n(), int(in.size()), l.node.out.c};
  const bool reorder = reorders(true, in);
  bf16* dx = l.grad_to<bf16>();
  const bf16* x = reorder ? as<bf16>(l.buf.aux) : l.xs<bf16>();
  bf16* fdx = reorder && dx ? as<bf16>(l.buf.aux2) : dx;
  if (l.buf.fp32)
    gpu::fc_backward(l.ctx, s, x, l.weights<bf16>(), as<float>(l.buf.dy), fdx, l.dw, l.db, l.dy16);
  else
    gpu::fc_backward(l.ctx, s, x, l.weights<bf16>(), as<bf16>(l.buf.dy), fdx, l.dw, l.db, l.dy16);
  if (fdx != dx) gpu::nchw_to_nhwc(l.ctx, l.n(), in.c, in.h * in.w, fdx, dx);
}

}  // namespace

void FcOp::gpu_setup(gpu::GpuSetup& s) const {
  const Dims in = s.node.in_dims[0];
  if (reorders(s.half, in)) {
    s.arena.request(s.buf.aux, size_t(s.max_batch) * in.size() * sizeof(bf16));
    s.arena.request(s.buf.aux2, size_t(s.max_batch) * in.size() * sizeof(bf16));
  }
  if (s.half && s.buf.fp32) s.dy16 = std::max(s.dy16, s.count());
}

void FcOp::gpu_forward(const GpuLayer& l) const { l.half ? fc_fwd<bf16>(l) : fc_fwd<float>(l); }

void FcOp::gpu_backward(const GpuLayer& l, int) const {
  if (l.half) {
    fc_bwd_bf16(l);
    return;
  }
  const FcShape s{l.n(), int(l.in().size()), l.node.out.c};
  gpu::fc_backward(l.ctx, s, l.xs<float>(), l.weights<float>(), as<float>(l.buf.dy), l.grad_to<float>(), l.dw, l.db);
}

}  // namespace convoy
