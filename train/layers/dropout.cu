// CUDA twin of dropout.cpp: the same counter-based mask (splitmix64 of key, sample key and element
// index), so CPU and GPU drop the same elements, for fp32 or bf16 activations; then the dropout
// op's passes.
#include "shared/counter_rng.h"
#include "train/cuda/gpu_context.h"
#include "train/cuda/storage.cuh"
#include "train/layers/dropout.h"
#include "train/layers/gpu_layer.h"

namespace convoy::gpu {
namespace {

// Products take the kept scale unrounded (the mask only says which elements stay), so a bf16 y is
// the CPU's x * mask rounded once.
template <typename T>
__global__ void drop_fwd(DropoutShape s, size_t total, float keep, const uint64_t* __restrict__ step_key, uint64_t salt,
                         const uint64_t* __restrict__ sample_keys, const T* __restrict__ x, T* __restrict__ y,
                         T* __restrict__ mask) {
  const uint64_t key = *step_key ^ salt;
  CONVOY_GRID_STRIDE(k, total) {
    const size_t n = k / s.per_sample, i = k % s.per_sample;
    const float m = counter_uniform(key, sample_keys[n], i) < s.p ? 0.f : keep;
    mask[k] = store<T>(m);
    y[k] = store<T>(load(x[k]) * m);
  }
}

template <typename T>
__global__ void drop_bwd(size_t total, float keep, const T* __restrict__ mask, const T* __restrict__ dy,
                         T* __restrict__ dx) {
  CONVOY_GRID_STRIDE(k, total) dx[k] = store<T>(load(dy[k]) * (load(mask[k]) != 0.f ? keep : 0.f));
}

}  // namespace

template <typename T>
void dropout_forward(Context& ctx, const DropoutShape& s, const uint64_t* key, uint64_t salt,
                     const uint64_t* sample_keys, const T* x, T* y, T* mask) {
  const size_t total = size_t(s.n) * s.per_sample;
  drop_fwd<<<grid_for(total), 256, 0, ctx.stream()>>>(s, total, 1.f / (1.f - s.p), key, salt, sample_keys, x, y, mask);
  CONVOY_CUDA_CHECK_LAUNCH();
}

template <typename T>
void dropout_backward(Context& ctx, const DropoutShape& s, const T* mask, const T* dy, T* dx) {
  const size_t total = size_t(s.n) * s.per_sample;
  drop_bwd<<<grid_for(total), 256, 0, ctx.stream()>>>(total, 1.f / (1.f - s.p), mask, dy, dx);
  CONVOY_CUDA_CHECK_LAUNCH();
}

#define CONVOY_DROPOUT_INSTANTIATE(T)                                                                         \
  template void dropout_forward<T>(Context&, const DropoutShape&, const uint64_t*, uint64_t, const uint64_t*, \
                                   const T*, T*, T*);                                                         \
  template void dropout_backward<T>(Context&, const DropoutShape&, const T*, const T*, T*);
CONVOY_DROPOUT_INSTANTIATE(float)
CONVOY_DROPOUT_INSTANTIATE(bf16)

}  // namespace convoy::gpu

namespace convoy {
namespace {

using gpu::as;
using gpu::bf16;
using gpu::GpuLayer;

template <typename T>
void drop_forward(const GpuLayer& l) {
  const float p = params_of<DropoutParams>(l.node.spec).p;
  if (l.batch.train && p > 0) {
    const DropoutShape s{l.n(), l.node.out.size(), p};
    gpu::dropout_forward(l.ctx, s, l.batch.key, dropout_salt(l.index), l.batch.sample_keys, l.xs<T>(), as<T>(l.buf.y),
                         as<T>(l.buf.aux));
  } else {
    gpu::device_copy(l.ctx, l.buf.y.get(), l.x[0], l.count() * sizeof(T));
  }
}

template <typename T>
void drop_backward(const GpuLayer& l) {
  if (!l.dx) return;
  const float p = params_of<DropoutParams>(l.node.spec).p;
  if (l.batch.train && p > 0)
    gpu::dropout_backward(l.ctx, {l.n(), l.node.out.size(), p}, as<T>(l.buf.aux), as<T>(l.buf.dy), l.grad_to<T>());
  else
    gpu::device_copy(l.ctx, l.dx, l.buf.dy.get(), l.count() * sizeof(T));
}

}  // namespace

void DropoutOp::gpu_setup(gpu::GpuSetup& s) const { s.arena.request(s.buf.aux, s.count() * s.elem()); }
void DropoutOp::gpu_forward(const GpuLayer& l) const { l.half ? drop_forward<bf16>(l) : drop_forward<float>(l); }
void DropoutOp::gpu_backward(const GpuLayer& l, int) const {
  l.half ? drop_backward<bf16>(l) : drop_backward<float>(l);
}

}  // namespace convoy
