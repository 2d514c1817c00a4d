// Reordering between NHWC and NCHW, and rounding fp32 to bf16: the seams of a bf16 net, where its
// NHWC activations meet the CPU's NCHW flatten order and where fp32 logits' gradients enter bf16
// matrix products. The tensors there are small (a flatten's input, [n, classes]), so one thread per
// output element suffices.
#include "train/cuda/gpu_context.h"
#include "train/cuda/layout_convert.h"
#include "train/cuda/storage.cuh"

namespace convoy::gpu {
namespace {

// y[n][ch][p] = x[n][p][ch]; with `to_nchw` false the reverse.
template <typename T, bool to_nchw>
__global__ void reorder(size_t total, int c, int hw, const T* __restrict__ x, T* __restrict__ y) {
  CONVOY_GRID_STRIDE(k, total) {
    const size_t plane = size_t(c) * hw, n = k / plane, r = k % plane;
    size_t from;
    if (to_nchw)
      from = n * plane + (r % hw) * c + r / hw;  // k is (n, ch = r / hw, p = r % hw)
    else
      from = n * plane + (r % c) * hw + r / c;  // k is (n, p = r / c, ch = r % c)
    y[k] = x[from];
  }
}

__global__ void round_bf16(size_t n, const float* __restrict__ x, bf16* __restrict__ y) {
  CONVOY_GRID_STRIDE(i, n) y[i] = store<bf16>(x[i]);
}

}  // namespace

template <typename T>
void nhwc_to_nchw(Context& ctx, int n, int c, int hw, const T* x, T* y) {
  const size_t total = size_t(n) * c * hw;
  reorder<T, true><<<grid_for(total), 256, 0, ctx.stream()>>>(total, c, hw, x, y);
  CONVOY_CUDA_CHECK_LAUNCH();
}

template <typename T>
void nchw_to_nhwc(Context& ctx, int n, int c, int hw, const T* x, T* y) {
  const size_t total = size_t(n) * c * hw;
  reorder<T, false><<<grid_for(total), 256, 0, ctx.stream()>>>(total, c, hw, x, y);
  CONVOY_CUDA_CHECK_LAUNCH();
}

void round_to_bf16(Context& ctx, size_t count, const float* x, bf16* y) {
  round_bf16<<<grid_for(count), 256, 0, ctx.stream()>>>(count, x, y);
  CONVOY_CUDA_CHECK_LAUNCH();
}

template void nhwc_to_nchw<float>(Context&, int, int, int, const float*, float*);
template void nhwc_to_nchw<bf16>(Context&, int, int, int, const bf16*, bf16*);
template void nchw_to_nhwc<float>(Context&, int, int, int, const float*, float*);
template void nchw_to_nhwc<bf16>(Context&, int, int, int, const bf16*, bf16*);

}  // namespace convoy::gpu
