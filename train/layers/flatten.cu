// The flatten op on the GPU: a copy, or in a bf16 net, whose activations are NHWC, a reordering of
// a spatial tensor to the CPU's NCHW flatten order (and back for the gradient).
#include "train/cuda/layout_convert.h"
#include "train/layers/flatten.h"
#include "train/layers/gpu_layer.h"

namespace convoy {
namespace {

using gpu::as;
using gpu::bf16;
using gpu::GpuLayer;

bool reorders(const GpuLayer& l) { return l.half && l.in().h * l.in().w > 1 && l.in().c > 1; }

template <typename T>
void flatten_forward(const GpuLayer& l) {
  if (reorders(l))
    gpu::nhwc_to_nchw(l.ctx, l.n(), l.in().c, l.in().h * l.in().w, l.xs<T>(), as<T>(l.buf.y));
  else
    gpu::device_copy(l.ctx, l.buf.y.get(), l.x[0], l.count() * sizeof(T));
}

template <typename T>
void flatten_backward(const GpuLayer& l) {
  if (!l.dx) return;
  if (reorders(l))
    gpu::nchw_to_nhwc(l.ctx, l.n(), l.in().c, l.in().h * l.in().w, as<T>(l.buf.dy), l.grad_to<T>());
  else
    gpu::device_copy(l.ctx, l.dx, l.buf.dy.get(), l.count() * sizeof(T));
}

}  // namespace

void FlattenOp::gpu_forward(const GpuLayer& l) const { l.half ? flatten_forward<bf16>(l) : flatten_forward<float>(l); }
void FlattenOp::gpu_backward(const GpuLayer& l, int) const {
  l.half ? flatten_backward<bf16>(l) : flatten_backward<float>(l);
}

}  // namespace convoy
