// CPU reference elementwise ops: memory-bound loops, parallel only when large enough to pay for
// waking the thread team.
#include "train/layers/elementwise.h"

namespace convoy {

void relu_forward(size_t count, const float* x, float* y) {
#pragma omp parallel for simd schedule(static) if (count > kParallelMin)
  for (size_t i = 0; i < count; ++i) y[i] = x[i] > 0.f ? x[i] : 0.f;
}

void relu_backward(size_t count, const float* y, const float* dy, float* dx) {
#pragma omp parallel for simd schedule(static) if (count > kParallelMin)
  // Both loads unconditional, so this compiles to a blend rather than an unpredictable branch.
  for (size_t i = 0; i < count; ++i) {
    const float g = dy[i];
    dx[i] = y[i] > 0.f ? g : 0.f;
  }
}

void add_forward(size_t count, const float* a, const float* b, float* y) {
#pragma omp parallel for simd schedule(static) if (count > kParallelMin)
  for (size_t i = 0; i < count; ++i) y[i] = a[i] + b[i];
}

void accumulate(size_t count, const float* src, float* dst) {
#pragma omp parallel for simd schedule(static) if (count > kParallelMin)
  for (size_t i = 0; i < count; ++i) dst[i] += src[i];
}

}  // namespace convoy
