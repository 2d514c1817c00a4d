// [train] accumulate = k: a step's k micro-batches, consecutive slices of the rank's batch, their
// gradients summed in fp32 beside the net's gradient buffer and their mean handed on with the last.
#pragma once
#include <cstddef>
#include <cstdint>

#if CONVOY_HAVE_CUDA
#include <cuda_runtime.h>

#include "train/cuda/step_scalars.h"
#endif

#if defined(__CUDACC__)
#define CONVOY_MICRO_HD __host__ __device__ __forceinline__
#else
#define CONVOY_MICRO_HD inline
#endif

namespace convoy {

// The step's gradient from the last micro-batch's g and the sum of the k - 1 before it: the mean of
// the k micro-batches' gradients, each of the mean loss over its own samples, which is the gradient
// of the mean loss over the whole batch (the micro-batches are of one size). The CPU and the CUDA
// kernel round alike.
CONVOY_MICRO_HD float mean_gradient(float g, float sum, float k) { return (sum + g) / k; }

// The CPU reference over n elements: sum += g after a micro-batch before the last; after the last,
// g = mean_gradient(g, sum, k) and sum = 0, ready for the next step.
void add_gradients(size_t n, const float* g, float* sum);
void finish_gradients(size_t n, float* g, float* sum, int k);

}  // namespace convoy

#if CONVOY_HAVE_CUDA
namespace convoy::gpu {

// What a step's micro-batches before the last leave for it on the device: their figures in
// batch_metrics' layout (loss sum, top-1 hits, samples, last mean loss), whether any loss was NaN
// or infinite, and the sum of their mean losses. Zero between steps.
struct MicroCarry {
  double sums[4];
  uint32_t nonfinite;
  double loss;
};

// The CUDA twins of the CPU's, over elements [lo, hi) of the flat buffers, on stream s.
void add_gradients(cudaStream_t s, size_t lo, size_t hi, const float* g, float* sum);
void finish_gradients(cudaStream_t s, size_t lo, size_t hi, float* g, float* sum, int k);
// After batch_metrics of a micro-batch before the last (its figures into c->sums, its verdict into
// *step): the verdict and loss carried into c.
void carry_micro_batch(cudaStream_t s, const StepScalars* step, MicroCarry* c);
// After batch_metrics of the last (its figures into c->sums too): step->nonfinite and step->loss
// become the whole step's (any micro-batch's loss NaN or infinite; the mean of their mean losses),
// c's figures join acc[0..2] unless the step is not finite, acc[3] is the step's mean loss, and c
// is cleared for the next step.
void close_micro_batches(cudaStream_t s, StepScalars* step, MicroCarry* c, double* acc, int k);

}  // namespace convoy::gpu
#endif
