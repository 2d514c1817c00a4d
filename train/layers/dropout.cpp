// CPU reference dropout: the mask comes from a counter hash, so any thread split (and the GPU)
// draws the same one.
#include "train/layers/dropout.h"

#include "train/layers/elementwise.h"

namespace convoy {

void dropout_forward(const DropoutShape& s, uint64_t key, const uint64_t* sample_keys,
                     const float* x, float* y, float* mask) {
  const float keep = 1.f / (1.f - s.p);
#pragma omp parallel for schedule(static) if (size_t(s.n) * s.per_sample > kParallelMin)
  for (int n = 0; n < s.n; ++n)
    for (size_t i = 0; i < s.per_sample; ++i) {
      const size_t k = n * s.per_sample + i;
      mask[k] = counter_uniform(key, sample_keys[n], i) < s.p ? 0.f : keep;
      y[k] = x[k] * mask[k];
    }
}

void dropout_backward(const DropoutShape& s, const float* mask, const float* dy, float* dx) {
  const size_t count = size_t(s.n) * s.per_sample;
#pragma omp parallel for simd schedule(static) if (count > kParallelMin)
  for (size_t i = 0; i < count; ++i) dx[i] = dy[i] * mask[i];
}

}  // namespace convoy
