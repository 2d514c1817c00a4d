// [train] ema: an exponential moving average of the net's weights and of batch norm's running
// statistics, updated after every optimiser step, evaluated in place of the trained ones and saved.
#pragma once
#include <cmath>
#include <cstddef>
#include <vector>

#include "train/net.h"

#if CONVOY_HAVE_CUDA
#include <cuda_runtime.h>

#include "train/cuda/step_scalars.h"
#endif

#if defined(__CUDACC__)
#define CONVOY_AVERAGE_HD __host__ __device__ __forceinline__
#else
#define CONVOY_AVERAGE_HD inline
#endif

namespace convoy {

// One element's update, avg <- decay * avg + (1 - decay) * x as torchvision's ExponentialMovingAverage,
// with one fused multiply-add written out so that the CPU and the CUDA kernel round alike.
CONVOY_AVERAGE_HD float averaged(float avg, float x, float decay, float rest) { return fmaf(decay, avg, rest * x); }

// The CPU reference over n elements; rest = float(1 - decay) in double.
void average_into(size_t n, float* avg, const float* x, double decay);

// The average of a net's flat weights and running statistics (the layout of Net::weights() and
// Net::state()), started at the net's own.
struct WeightAverage {
  double decay = 0;
  std::vector<float> weights, state;

  WeightAverage(double decay, Net& net) : decay(decay), weights(net.weights()), state(net.state()) {}
  // After an optimiser step that updated the net.
  void update(Net& net);
  // Exchanges the net's weights and statistics with the average's (evaluation with the average).
  void swap_with(Net& net);
};

}  // namespace convoy

#if CONVOY_HAVE_CUDA
namespace convoy::gpu {

// The CUDA twin of average_into (weight_average.cu), on `stream`; nothing where s->nonfinite is
// set (a skipped step, whose update did not run either).
void average_into(cudaStream_t stream, size_t n, float* avg, const float* x, double decay, const StepScalars* s);
// Exchanges a[0, n) and b[0, n) on `stream`.
void swap_arrays(cudaStream_t stream, size_t n, float* a, float* b);

}  // namespace convoy::gpu
#endif
