// CUDA twin of weight_average.cpp: the moving average over the flat weights and running statistics
// in one launch each, queued after the step's update, and the exchange that evaluation uses.
#include "train/cuda/gpu_context.h"
#include "train/weight_average.h"

namespace convoy::gpu {
namespace {

__global__ void average(size_t n, float* __restrict__ avg, const float* __restrict__ x, float decay, float rest,
                        const StepScalars* __restrict__ s) {
  if (s->nonfinite) return;
  CONVOY_GRID_STRIDE(i, n) avg[i] = averaged(avg[i], x[i], decay, rest);
}

__global__ void exchange(size_t n, float* __restrict__ a, float* __restrict__ b) {
  CONVOY_GRID_STRIDE(i, n) {
    const float t = a[i];
    a[i] = b[i];
    b[i] = t;
  }
}

}  // namespace

void average_into(cudaStream_t stream, size_t n, float* avg, const float* x, double decay, const StepScalars* s) {
  if (n == 0) return;
  average<<<grid_for(n), 256, 0, stream>>>(n, avg, x, float(decay), float(1 - decay), s);
  CONVOY_CUDA_CHECK_LAUNCH();
}

void swap_arrays(cudaStream_t stream, size_t n, float* a, float* b) {
  if (n == 0) return;
  exchange<<<grid_for(n), 256, 0, stream>>>(n, a, b);
  CONVOY_CUDA_CHECK_LAUNCH();
}

}  // namespace convoy::gpu
