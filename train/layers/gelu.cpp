// The gelu op on the CPU: elementwise in float with the C library's erf and exp, parallel only
// when large enough to pay for waking the thread team; its shape is its input's.
#include "train/layers/gelu.h"

#include <cmath>

#include "train/layers/elementwise.h"

namespace convoy {
namespace {

constexpr float kSqrtHalf = 0.70710678118654752440f;    // 1 / sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;  // 1 / sqrt(2 pi)

}  // namespace

void gelu_forward(size_t count, const float* x, float* y) {
#pragma omp parallel for schedule(static) if (count > kParallelMin)
  for (size_t i = 0; i < count; ++i) y[i] = 0.5f * x[i] * (1.f + std::erf(x[i] * kSqrtHalf));
}

void gelu_backward(size_t count, const float* x, const float* dy, float* dx) {
#pragma omp parallel for schedule(static) if (count > kParallelMin)
  for (size_t i = 0; i < count; ++i) {
    const float v = x[i];
    const float cdf = 0.5f * (1.f + std::erf(v * kSqrtHalf)), pdf = kInvSqrt2Pi * std::exp(-0.5f * v * v);
    dx[i] = dy[i] * (cdf + v * pdf);
  }
}

// One FLOP per element, as the other elementwise ops count.
OpShape GeluOp::shape(const ShapeIn& s) const {
  OpShape o;
  o.out = s.in[0];
  o.flops = double(s.in[0].size());
  return o;
}

double GeluOp::forward(const CpuLayer& l) const {
  gelu_forward(l.count(), l.x[0], l.y);
  return 0;
}

void GeluOp::backward(const CpuLayer& l, int) const {
  if (l.dx) gelu_backward(l.count(), l.x[0], l.dy, l.dx);
}

const Op& gelu_op() {
  static const GeluOp op;
  return op;
}

}  // namespace convoy
