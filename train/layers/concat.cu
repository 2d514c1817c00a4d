// CUDA twin of concat.cpp: each input's runs copied into their slice of the output (and the slice of
// the output's gradient back, written or added), for fp32 or bf16 elements, in 16-byte packs where
// the runs, their places and the pointers allow; then the concat op's passes, one copy per input.
#include "train/cuda/gpu_context.h"
#include "train/cuda/storage.cuh"
#include "train/layers/concat.h"
#include "train/layers/gpu_layer.h"

namespace convoy::gpu {
namespace {

// dst[r * dst_pitch + j] (+)= src[r * src_pitch + j] for runs of `width` elements (all in Packs of V).
template <typename T, int V, bool Add>
__global__ void copy_runs(size_t total, size_t width, const T* __restrict__ src, size_t src_pitch, T* dst,
                          size_t dst_pitch) {
  using P = Pack<T, V>;
  const size_t w = width / V;
  CONVOY_GRID_STRIDE(i, total) {
    const size_t r = i / w, j = i % w;
    const P v = reinterpret_cast<const P*>(src + r * src_pitch)[j];
    P* out = reinterpret_cast<P*>(dst + r * dst_pitch) + j;
    if constexpr (Add) {
      P sum = *out;
#pragma unroll
      for (int q = 0; q < V; ++q) sum.v[q] = store<T>(load(sum.v[q]) + load(v.v[q]));
      *out = sum;
    } else {
      *out = v;
    }
  }
}

template <typename T, bool Add>
void copy(Context& ctx, size_t runs, size_t width, const T* src, size_t src_pitch, T* dst, size_t dst_pitch) {
  constexpr int V = kPack<T>;
  const size_t total = runs * width;
  if (total == 0) return;
  if (width % V == 0 && src_pitch % V == 0 && dst_pitch % V == 0 && pack_aligned<T, V>(src, dst))
    copy_runs<T, V, Add>
        <<<grid_for(total / V), 256, 0, ctx.stream()>>>(total / V, width, src, src_pitch, dst, dst_pitch);
  else
    copy_runs<T, 1, Add><<<grid_for(total), 256, 0, ctx.stream()>>>(total, width, src, src_pitch, dst, dst_pitch);
  CONVOY_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <typename T>
void concat_forward(Context& ctx, const ConcatSlice& s, const T* x, T* y) {
  copy<T, false>(ctx, s.runs, s.width, x, s.width, y + s.offset, s.pitch);
}

template <typename T>
void concat_backward(Context& ctx, const ConcatSlice& s, const T* dy, T* dx, bool add) {
  if (add)
    copy<T, true>(ctx, s.runs, s.width, dy + s.offset, s.pitch, dx, s.width);
  else
    copy<T, false>(ctx, s.runs, s.width, dy + s.offset, s.pitch, dx, s.width);
}

template void concat_forward<float>(Context&, const ConcatSlice&, const float*, float*);
template void concat_forward<bf16>(Context&, const ConcatSlice&, const bf16*, bf16*);
template void concat_backward<float>(Context&, const ConcatSlice&, const float*, float*, bool);
template void concat_backward<bf16>(Context&, const ConcatSlice&, const bf16*, bf16*, bool);

}  // namespace convoy::gpu

namespace convoy {
namespace {

using gpu::as;
using gpu::bf16;
using gpu::GpuLayer;

template <typename T>
void concat_fwd(const GpuLayer& l) {
  for (size_t k = 0; k < l.node.in.size(); ++k)
    gpu::concat_forward(l.ctx, concat_slice(l.node, int(k), l.n(), l.half), l.xs<T>(int(k)), as<T>(l.buf.y));
}

template <typename T>
void concat_bwd(const GpuLayer& l, int k) {
  if (l.dx)
    gpu::concat_backward(l.ctx, concat_slice(l.node, k, l.n(), l.half), as<T>(l.buf.dy), l.grad_to<T>(), l.dx_add);
}

}  // namespace

void ConcatOp::gpu_forward(const GpuLayer& l) const { l.half ? concat_fwd<bf16>(l) : concat_fwd<float>(l); }
void ConcatOp::gpu_backward(const GpuLayer& l, int k) const {
  l.half ? concat_bwd<bf16>(l, k) : concat_bwd<float>(l, k);
}

}  // namespace convoy
