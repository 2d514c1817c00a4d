// GPU timing for the CUDA benchmarks: milliseconds per call of some queued work, from CUDA events
// around repeated calls on the context's stream after warm-up calls.
#pragma once
#include <functional>

#include "shared/cuda_owners.h"
#include "train/cuda/gpu_context.h"

namespace convoy::bench {

// Milliseconds per call of f, from events around `reps` calls after `warmup` calls.
inline double event_ms(gpu::Context& ctx, const std::function<void()>& f, int reps, int warmup) {
  for (int i = 0; i < warmup; ++i) f();
  CudaEvent start, stop;
  CONVOY_CUDA_CHECK(cudaEventRecord(start.get(), ctx.stream()));
  for (int i = 0; i < reps; ++i) f();
  CONVOY_CUDA_CHECK(cudaEventRecord(stop.get(), ctx.stream()));
  CONVOY_CUDA_CHECK(cudaEventSynchronize(stop.get()));
  float ms = 0;
  CONVOY_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
  return double(ms) / reps;
}

}  // namespace convoy::bench
