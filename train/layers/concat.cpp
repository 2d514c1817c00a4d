// The concat op on the CPU: each input's images copied into their slice of the output's, and back
// for the gradients; its shape rule checks that the inputs agree in height and width.
#include "train/layers/concat.h"

#include <cstdint>
#include <cstring>

#include "train/layers/elementwise.h"

namespace convoy {

ConcatSlice concat_slice(const Node& nd, int k, int n, bool nhwc) {
  size_t before = 0;
  for (int i = 0; i < k; ++i) before += size_t(nd.in_dims[size_t(i)].c);
  const Dims in = nd.in_dims[size_t(k)];
  const size_t hw = size_t(in.h) * in.w, inner = nhwc ? 1 : hw;
  return {nhwc ? size_t(n) * hw : size_t(n), size_t(in.c) * inner, size_t(nd.out.c) * inner, before * inner};
}

void concat_forward(const ConcatSlice& s, const float* x, float* y) {
  const long long runs = (long long)s.runs;
#pragma omp parallel for schedule(static) if (s.runs * s.width > kParallelMin)
  for (long long r = 0; r < runs; ++r)
    std::memcpy(y + s.offset + size_t(r) * s.pitch, x + size_t(r) * s.width, s.width * sizeof(float));
}

void concat_backward(const ConcatSlice& s, const float* dy, float* dx) {
  const long long runs = (long long)s.runs;
#pragma omp parallel for schedule(static) if (s.runs * s.width > kParallelMin)
  for (long long r = 0; r < runs; ++r)
    std::memcpy(dx + size_t(r) * s.width, dy + s.offset + size_t(r) * s.pitch, s.width * sizeof(float));
}

// No arithmetic: no FLOPs, as flatten.
OpShape ConcatOp::shape(const ShapeIn& s) const {
  long long channels = 0;
  for (size_t k = 0; k < s.in.size(); ++k) {
    if (s.in[k].h != s.in[0].h || s.in[k].w != s.in[0].w)
      s.fail("inputs differ in height and width: " + dims_text(s.in[0]) + " ('" + s.spec.inputs[0] + "') and " +
             dims_text(s.in[k]) + " ('" + s.spec.inputs[k] + "')");
    channels += s.in[k].c;
  }
  if (channels > INT32_MAX) s.fail("the inputs have " + std::to_string(channels) + " channels, more than 2^31 - 1");
  OpShape o;
  o.out = {int(channels), s.in[0].h, s.in[0].w};
  return o;
}

double ConcatOp::forward(const CpuLayer& l) const {
  for (size_t k = 0; k < l.node.in.size(); ++k) concat_forward(concat_slice(l.node, int(k), l.n), l.x[k], l.y);
  return 0;
}

void ConcatOp::backward(const CpuLayer& l, int k) const {
  if (l.dx) concat_backward(concat_slice(l.node, k, l.n), l.dy, l.dx);
}

const Op& concat_op() {
  static const ConcatOp op;
  return op;
}

}  // namespace convoy
