// The step's metrics kernels: a warp per sample finds its top-1 hit, then one block sums the batch's
// losses and hits in a fixed order and marks a NaN or infinite loss in the step's device scalars.
#include "train/cuda/batch_metrics.h"
#include "train/cuda/channels.cuh"
#include "train/cuda/gpu_context.h"

namespace convoy::gpu {
namespace {

// hit[i] = 1 where no class is above sample i's label in probability (ties to the lower index),
// else 0; the warp's lanes read its classes side by side. (One thread a sample, reading a row of
// classes alone, took 83 us of ResNet-50's step on the H200.)
__global__ void top1_hits(int n, int classes, const float* __restrict__ probs, const int* __restrict__ labels,
                          float* __restrict__ hit) {
  const int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  if (row >= n) return;
  const float* p = probs + size_t(row) * classes;
  const int label = labels[row];
  const float mine = p[label];
  bool above = false;
  for (int k = lane; k < classes; k += 32) above |= p[k] > mine || (p[k] == mine && k < label);
  above = __any_sync(0xffffffffu, above);
  if (lane == 0) hit[row] = above ? 0.f : 1.f;
}

// One block of 256 threads: each thread walks a fixed stride of samples and the block reduces in
// a fixed tree, so the sums are the same on every run.
__global__ void metrics(int n, const float* __restrict__ hit, const float* __restrict__ losses,
                        double* __restrict__ acc, StepScalars* __restrict__ step) {
  __shared__ double loss_sum[256], hits[256];
  double l = 0, h = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    l += losses[i];
    h += hit[i];
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
  float* hit = channels::Workspace(ctx).take<float>(size_t(n), "batch metrics");
  top1_hits<<<(n * 32 + 255) / 256, 256, 0, ctx.stream()>>>(n, classes, probs, labels, hit);
  CONVOY_CUDA_CHECK_LAUNCH();
  metrics<<<1, 256, 0, ctx.stream()>>>(n, hit, losses, acc, step);
  CONVOY_CUDA_CHECK_LAUNCH();
}

}  // namespace convoy::gpu
