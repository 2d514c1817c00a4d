// CPU reference elementwise ops: memory-bound loops, parallel only when large enough to pay for
// waking the thread team.
#include "train/layers/elementwise.h"

#include <cstring>

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

OpShape ReluOp::shape(const ShapeIn& s) const {
  OpShape o;
  o.out = s.in[0];
  o.flops = double(s.in[0].size());
  return o;
}

double ReluOp::forward(const CpuLayer& l) const {
  relu_forward(l.count(), l.x[0], l.y);
  return 0;
}

void ReluOp::backward(const CpuLayer& l, int) const {
  if (l.dx) relu_backward(l.count(), l.node.y.data(), l.dy, l.dx);
}

// bf16: the residual add runs its ReLU, takes a deferred batch norm's output as scale and shift,
// sums its ReLU gradient's two parts as it reads them, and takes deferred batch norms' gradient sums.
OpFusion AddOp::fusion(const Node&) const {
  OpFusion f;
  f.relu_bf16 = true;
  f.takes_channel_affine = true;
  f.sums_relu_gradient_parts = true;
  f.takes_deferred_gradient_sums = true;
  return f;
}

OpShape AddOp::shape(const ShapeIn& s) const {
  if (!(s.in[0] == s.in[1]))
    s.fail("inputs have different shapes " + dims_text(s.in[0]) + " and " + dims_text(s.in[1]));
  OpShape o;
  o.out = s.in[0];
  o.flops = double(s.in[0].size());
  return o;
}

double AddOp::forward(const CpuLayer& l) const {
  add_forward(l.count(), l.x[0], l.x[1], l.y);
  return 0;
}

void AddOp::backward(const CpuLayer& l, int) const {
  if (l.dx) std::memcpy(l.dx, l.dy, l.count() * sizeof(float));
}

const Op& relu_op() {
  static const ReluOp op;
  return op;
}

const Op& add_op() {
  static const AddOp op;
  return op;
}

}  // namespace convoy
