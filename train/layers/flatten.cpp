// The flatten op on the CPU: NCHW is already the flat order, so a copy each way.
#include "train/layers/flatten.h"

#include <cstring>

namespace convoy {

OpShape FlattenOp::shape(const ShapeIn& s) const {
  OpShape o;
  o.out = {int(s.in[0].size()), 1, 1};
  return o;
}

double FlattenOp::forward(const CpuLayer& l) const {
  std::memcpy(l.y, l.x[0], l.count() * sizeof(float));
  return 0;
}

void FlattenOp::backward(const CpuLayer& l, int) const {
  if (l.dx) std::memcpy(l.dx, l.dy, l.count() * sizeof(float));
}

const Op& flatten_op() {
  static const FlattenOp op;
  return op;
}

}  // namespace convoy
