// CUDA twin of softmax_xent.cpp: one warp per sample (classes are few), max-subtracted, with the
// sum of exponentials in double as on the CPU. Logits and their gradient may be bf16; everything in
// between is fp32 or double.
#include "train/layers/gpu_ops.h"
#include "train/layers/storage.cuh"

namespace convoy::gpu {
namespace {

template <typename T>
__global__ void xent_fwd(int n, int classes, const T* __restrict__ logits, const int* __restrict__ labels,
                         float* __restrict__ probs, float* __restrict__ loss) {
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
  if (lane == 0) loss[row] = float(log_sum - double(load(z[labels[row]]) - m));
}

template <typename T>
__global__ void xent_bwd(int n, int classes, const float* __restrict__ probs, const int* __restrict__ labels,
                         float grad_scale, T* __restrict__ dlogits) {
  CONVOY_GRID_STRIDE(j, size_t(n) * classes) {
    const int k = j % classes;
    dlogits[j] = store<T>((probs[j] - (k == labels[j / classes] ? 1.f : 0.f)) * grad_scale);
  }
}

// One block of 256 threads: each thread walks a fixed stride of samples and the block reduces in
// a fixed tree, so the sums are the same on every run.
__global__ void metrics(int n, int classes, const float* __restrict__ probs, const int* __restrict__ labels,
                        const float* __restrict__ losses, double* __restrict__ acc, StepScalars* __restrict__ step) {
  __shared__ double loss_sum[256], hits[256];
  double l = 0, h = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float* p = probs + size_t(i) * classes;
    const int label = labels[i];
    const float mine = p[label];
    int above = 0;
    for (int k = 0; k < classes && above == 0; ++k) above += p[k] > mine || (p[k] == mine && k < label);
    l += losses[i];
    h += above == 0;
  }
  loss_sum[threadIdx.x] = l;
  hits[threadIdx.x] = h;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      loss_sum[threadIdx.x] += loss_sum[threadIdx.x + half];
      hits[threadIdx.x] += hits[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const bool finite = isfinite(loss_sum[0]);
    if (finite) {
      acc[0] += loss_sum[0];
      acc[1] += hits[0];
      acc[2] += n;
    }
    acc[3] = loss_sum[0] / n;
    if (step) {
      step->nonfinite = !finite;
      step->loss = float(loss_sum[0] / n);
    }
  }
}

}  // namespace

void batch_metrics(Context& ctx, int n, int classes, const float* probs, const int* labels, const float* losses,
                   double* acc, StepScalars* step) {
  metrics<<<1, 256, 0, ctx.stream()>>>(n, classes, probs, labels, losses, acc, step);
  CONVOY_CUDA_CHECK_LAUNCH();
}

template <typename T>
void softmax_xent_forward(Context& ctx, int n, int classes, const T* logits, const int* labels, float* probs,
                          float* loss) {
  xent_fwd<<<(n * 32 + 255) / 256, 256, 0, ctx.stream()>>>(n, classes, logits, labels, probs, loss);
  CONVOY_CUDA_CHECK_LAUNCH();
}

template <typename T>
void softmax_xent_backward(Context& ctx, int n, int classes, const float* probs, const int* labels,
                           float grad_scale, T* dlogits) {
  xent_bwd<<<grid_for(size_t(n) * classes), 256, 0, ctx.stream()>>>(n, classes, probs, labels, grad_scale, dlogits);
  CONVOY_CUDA_CHECK_LAUNCH();
}

template void softmax_xent_forward<float>(Context&, int, int, const float*, const int*, float*, float*);
template void softmax_xent_forward<bf16>(Context&, int, int, const bf16*, const int*, float*, float*);
template void softmax_xent_backward<float>(Context&, int, int, const float*, const int*, float, float*);
template void softmax_xent_backward<bf16>(Context&, int, int, const float*, const int*, float, bf16*);

}  // namespace convoy::gpu
