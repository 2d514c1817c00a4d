// The CPU side of gradient accumulation: element-wise passes over the flat gradient buffer, split
// over the OpenMP threads (each element's arithmetic is the same whatever the split).
#include "train/micro_batches.h"

namespace convoy {

void add_gradients(size_t n, const float* g, float* sum) {
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < (long long)n; ++i) sum[i] += g[i];
}

void finish_gradients(size_t n, float* g, float* sum, int k) {
  const float kf = float(k);
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < (long long)n; ++i) {
    g[i] = mean_gradient(g[i], sum[i], kf);
    sum[i] = 0.f;
  }
}

}  // namespace convoy
