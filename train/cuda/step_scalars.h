// The per-step values a CUDA training step's kernels read from device memory rather than from
// their launch arguments, so that one captured CUDA graph serves every step.
#pragma once
#include <cstdint>

namespace convoy::gpu {

struct StepScalars {
  uint64_t key = 0;      // the step's random key (dropout)
  float lr = 0;          // learning rate
  float c1 = 1, c2 = 1;  // Adam's bias corrections 1 - beta^t
  // Written on the device by batch_metrics: the step's mean loss, and 1 when it is NaN or infinite
  // (on any rank, once GpuStep has all-reduced it), in which case the fused updates (and
  // restore_if_nonfinite) leave the weights and the optimiser state as they were.
  uint32_t nonfinite = 0;
  float loss = 0;
};
// The scalars of optimiser step t (t counts from 1) at learning rate lr (optimizer_update.cu).
StepScalars step_scalars(uint64_t key, double lr, double beta1, double beta2, long long t);

}  // namespace convoy::gpu
