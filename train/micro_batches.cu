// CUDA twin of micro_batches.cpp: the gradient passes over a range of the flat buffer (a bucket
// of the all-reduce, or all of it), and the one-thread kernels that carry a micro-batch's verdict
// and figures to the step's last, all queued on the step's stream so that one graph holds them.
#include "train/cuda/gpu_context.h"
#include "train/micro_batches.h"

namespace convoy::gpu {
namespace {

__global__ void add_into_sum(size_t n, const float* __restrict__ g, float* __restrict__ sum) {
  CONVOY_GRID_STRIDE(i, n) sum[i] += g[i];
}

__global__ void finish_mean(size_t n, float* __restrict__ g, float* __restrict__ sum, float k) {
  CONVOY_GRID_STRIDE(i, n) {
    g[i] = mean_gradient(g[i], sum[i], k);
    sum[i] = 0.f;
  }
}

__global__ void carry_verdict(const StepScalars* __restrict__ step, MicroCarry* __restrict__ c) {
  c->nonfinite |= step->nonfinite;
  c->loss += step->loss;
}

__global__ void close_step(StepScalars* __restrict__ step, MicroCarry* __restrict__ c, double* __restrict__ acc,
                           int k) {
  const uint32_t bad = c->nonfinite | step->nonfinite;
  const double loss = (c->loss + step->loss) / k;
  if (!bad)
    for (int i = 0; i < 3; ++i) acc[i] += c->sums[i];
  acc[3] = loss;
  for (int i = 0; i < 4; ++i) c->sums[i] = 0;
  c->nonfinite = 0;
  c->loss = 0;
  step->nonfinite = bad;
  step->loss = float(loss);
}

}  // namespace

void add_gradients(cudaStream_t s, size_t lo, size_t hi, const float* g, float* sum) {
  if (hi <= lo) return;
  add_into_sum<<<grid_for(hi - lo), 256, 0, s>>>(hi - lo, g + lo, sum + lo);
  CONVOY_CUDA_CHECK_LAUNCH();
}

void finish_gradients(cudaStream_t s, size_t lo, size_t hi, float* g, float* sum, int k) {
  if (hi <= lo) return;
  finish_mean<<<grid_for(hi - lo), 256, 0, s>>>(hi - lo, g + lo, sum + lo, float(k));
  CONVOY_CUDA_CHECK_LAUNCH();
}

void carry_micro_batch(cudaStream_t s, const StepScalars* step, MicroCarry* c) {
  carry_verdict<<<1, 1, 0, s>>>(step, c);
  CONVOY_CUDA_CHECK_LAUNCH();
}

void close_micro_batches(cudaStream_t s, StepScalars* step, MicroCarry* c, double* acc, int k) {
  close_step<<<1, 1, 0, s>>>(step, c, acc, k);
  CONVOY_CUDA_CHECK_LAUNCH();
}

}  // namespace convoy::gpu
