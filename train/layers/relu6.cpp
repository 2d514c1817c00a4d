// The relu6 op on the CPU: elementwise clamps in float, parallel only when large enough to pay for
// waking the thread team; its shape is its input's.
#include "train/layers/relu6.h"

#include "train/layers/elementwise.h"

namespace convoy {

void relu6_forward(size_t count, const float* x, float* y) {
#pragma omp parallel for simd schedule(static) if (count > kParallelMin)
  for (size_t i = 0; i < count; ++i) y[i] = x[i] > 0.f ? (x[i] < 6.f ? x[i] : 6.f) : 0.f;
}

void relu6_backward(size_t count, const float* y, const float* dy, float* dx) {
#pragma omp parallel for simd schedule(static) if (count > kParallelMin)
  // Both loads unconditional, so this compiles to a blend rather than an unpredictable branch.
  for (size_t i = 0; i < count; ++i) {
    const float g = dy[i], v = y[i];
    dx[i] = v > 0.f && v < 6.f ? g : 0.f;
  }
}

// One FLOP per element, as the other elementwise ops count.
OpShape Relu6Op::shape(const ShapeIn& s) const {
  OpShape o;
  o.out = s.in[0];
  o.flops = double(s.in[0].size());
  return o;
}

double Relu6Op::forward(const CpuLayer& l) const {
  relu6_forward(l.count(), l.x[0], l.y);
  return 0;
}

void Relu6Op::backward(const CpuLayer& l, int) const {
  if (l.dx) relu6_backward(l.count(), l.node.y.data(), l.dy, l.dx);
}

const Op& relu6_op() {
  static const Relu6Op op;
  return op;
}

}  // namespace convoy
