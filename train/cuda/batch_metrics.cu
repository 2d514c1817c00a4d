// The step's metrics kernel: one block sums the batch's losses and top-1 hits in a fixed order and
// marks a NaN or infinite loss in the step's device scalars.
#include "train/cuda/batch_metrics.h"
#include "train/gpu_context.h"

namespace convoy::gpu {
namespace {

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

}  // namespace convoy::gpu
