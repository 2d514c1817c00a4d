// CUDA twin of softmax_xent.cpp: one warp per sample (classes are few), max-subtracted, with the
// sum of exponentials in double as on the CPU. Logits and their gradient may be bf16; everything in
// between is fp32 or double. Then the softmax_xent op's passes.
#include "train/cuda/gpu_context.h"
#include "train/cuda/storage.cuh"
#include "train/layers/gpu_layer.h"
#include "train/layers/softmax_xent.h"

namespace convoy::gpu {
namespace {

template <typename T>
__global__ void xent_fwd(int n, int classes, const T* __restrict__ logits, const int* __restrict__ labels,
                         float* __restrict__ probs, float* __restrict__ loss, float smoothing) {
  const int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  if (row >= n) return;
  const T* z = logits + size_t(row) * classes;
  float* p = probs + size_t(row) * classes;
  float m = -INFINITY;
  for (int k = lane; k < classes; k += 32) m = fmaxf(m, load(z[k]));
  for (int off = 16; off > 0; off /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  double sum = 0;
  for (int k = lane; k < classes; k += 32) sum += exp(double(load(z[k]) - m));
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  const double log_sum = log(sum);
  for (int k = lane; k < classes; k += 32) p[k] = float(exp(double(load(z[k]) - m) - log_sum));
  double nll = log_sum - double(load(z[labels[row]]) - m);
  if (smoothing > 0) {  // as the CPU: -mean(log p) = log_sum - mean(z - m)
    double centred = 0;
    for (int k = lane; k < classes; k += 32) centred += double(load(z[k]) - m);
    for (int off = 16; off > 0; off /= 2) centred += __shfl_xor_sync(0xffffffffu, centred, off);
    nll = (1 - double(smoothing)) * nll + double(smoothing) * (log_sum - centred / classes);
  }
  if (lane == 0) loss[row] = float(nll);
}

template <typename T>
__global__ void xent_bwd(int n, int classes, const float* __restrict__ probs, const int* __restrict__ labels,
                         float grad_scale, SmoothedTarget t, T* __restrict__ dlogits) {
  CONVOY_GRID_STRIDE(j, size_t(n) * classes) {
    const int k = j % classes;
    dlogits[j] = store<T>((probs[j] - (k == labels[j / classes] ? t.on : t.off)) * grad_scale);
  }
}

}  // namespace

template <typename T>
void softmax_xent_forward(Context& ctx, int n, int classes, const T* logits, const int* labels, float* probs,
                          float* loss, float smoothing) {
  xent_fwd<<<(n * 32 + 255) / 256, 256, 0, ctx.stream()>>>(n, classes, logits, labels, probs, loss, smoothing);
  CONVOY_CUDA_CHECK_LAUNCH();
}

template <typename T>
void softmax_xent_backward(Context& ctx, int n, int classes, const float* probs, const int* labels, float grad_scale,
                           T* dlogits, float smoothing) {
  xent_bwd<<<grid_for(size_t(n) * classes), 256, 0, ctx.stream()>>>(n, classes, probs, labels, grad_scale,
                                                                    smoothed_target(classes, smoothing), dlogits);
  CONVOY_CUDA_CHECK_LAUNCH();
}

template void softmax_xent_forward<float>(Context&, int, int, const float*, const int*, float*, float*, float);
template void softmax_xent_forward<bf16>(Context&, int, int, const bf16*, const int*, float*, float*, float);
template void softmax_xent_backward<float>(Context&, int, int, const float*, const int*, float, float*, float);
template void softmax_xent_backward<bf16>(Context&, int, int, const float*, const int*, float, bf16*, float);

}  // namespace convoy::gpu

namespace convoy {
namespace {

using gpu::bf16;
using gpu::GpuLayer;

// Logits that stay fp32 in a bf16 net (an fc's, Op::fp32_logits) are read and given their gradient as fp32.
// The label smoothing of a training batch (evaluation reports the plain cross-entropy).
float smoothing_of(const gpu::GpuBatch& b) { return b.train ? b.label_smoothing : 0.f; }

template <typename T>
void xent_forward(const GpuLayer& l) {
  const gpu::GpuBatch& b = l.batch;
  const float eps = smoothing_of(b);
  if (l.x_fp32[0])
    gpu::softmax_xent_forward(l.ctx, b.n, b.classes, l.xs<float>(), b.labels, b.probs, b.losses, eps);
  else
    gpu::softmax_xent_forward(l.ctx, b.n, b.classes, l.xs<T>(), b.labels, b.probs, b.losses, eps);
}

template <typename T>
void xent_backward(const GpuLayer& l, int k) {
  if (!l.dx) return;
  const gpu::GpuBatch& b = l.batch;
  const float eps = smoothing_of(b);
  if (l.x_fp32[k])
    gpu::softmax_xent_backward(l.ctx, b.n, b.classes, b.probs, b.labels, 1.f / float(b.n), l.grad_to<float>(), eps);
  else
    gpu::softmax_xent_backward(l.ctx, b.n, b.classes, b.probs, b.labels, 1.f / float(b.n), l.grad_to<T>(), eps);
}

}  // namespace

void SoftmaxXentOp::gpu_forward(const GpuLayer& l) const { l.half ? xent_forward<bf16>(l) : xent_forward<float>(l); }
void SoftmaxXentOp::gpu_backward(const GpuLayer& l, int k) const {
  l.half ? xent_backward<bf16>(l, k) : xent_backward<float>(l, k);
}

}  // namespace convoy
