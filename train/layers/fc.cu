// CUDA twin of fc.cpp: cuBLAS sgemm on row-major buffers (read by cuBLAS as their column-major
// transposes), with small kernels for the bias and its gradient.
#include "train/layers/gpu_ops.h"

namespace convoy::gpu {
namespace {

__global__ void add_bias(int n, int out, const float* __restrict__ b, float* __restrict__ y) {
  CONVOY_GRID_STRIDE(i, size_t(n) * out) y[i] += b[i % out];
}

// db[o] = sum over samples of dy[s][o]; one thread per output, summed in sample order.
__global__ void bias_grad(int n, int out, const float* __restrict__ dy, float* __restrict__ db) {
  const int o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= out) return;
  float sum = 0.f;
  for (int s = 0; s < n; ++s) sum += dy[size_t(s) * out + o];
  db[o] = sum;
}

}  // namespace

void fc_forward(Context& ctx, const FcShape& s, const float* x, const float* w, const float* b, float* y) {
  const float one = 1.f, zero = 0.f;
  // y^T (out x n) = w (out x in) . x^T (in x n), in cuBLAS's column-major view.
  CONVOY_CUBLAS_CHECK(cublasSgemm(ctx.cublas(), CUBLAS_OP_T, CUBLAS_OP_N, s.out, s.n, s.in, &one, w, s.in,
                                  x, s.in, &zero, y, s.out));
  if (b) {
    add_bias<<<grid_for(size_t(s.n) * s.out), 256, 0, ctx.stream()>>>(s.n, s.out, b, y);
    CONVOY_CUDA_CHECK_LAUNCH();
  }
}

void fc_backward(Context& ctx, const FcShape& s, const float* x, const float* w, const float* dy, float* dx,
                 float* dw, float* db) {
  const float one = 1.f, zero = 0.f;
  // dw (out x in, row-major) = dy^T . x
  CONVOY_CUBLAS_CHECK(cublasSgemm(ctx.cublas(), CUBLAS_OP_N, CUBLAS_OP_T, s.in, s.out, s.n, &one, x, s.in,
                                  dy, s.out, &zero, dw, s.in));
  // dx (n x in, row-major) = dy . w
  if (dx)
    CONVOY_CUBLAS_CHECK(cublasSgemm(ctx.cublas(), CUBLAS_OP_N, CUBLAS_OP_N, s.in, s.n, s.out, &one, w, s.in,
                                    dy, s.out, &zero, dx, s.in));
  if (db) {
    bias_grad<<<(s.out + 255) / 256, 256, 0, ctx.stream()>>>(s.n, s.out, dy, db);
    CONVOY_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace convoy::gpu
