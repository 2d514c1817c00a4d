// CUDA twin of relu6.cpp through the shared elementwise kernel (16-byte packs where the pointers
// allow), for fp32 or bf16 elements; then the relu6 op's passes.
#include "train/cuda/elementwise_map.cuh"
#include "train/cuda/gpu_context.h"
#include "train/layers/gpu_layer.h"
#include "train/layers/relu6.h"

namespace convoy::gpu {
namespace {

struct Relu6 {
  __device__ float operator()(float x, float) const { return x > 0.f ? (x < 6.f ? x : 6.f) : 0.f; }
};
struct Relu6Grad {  // (y, dy)
  __device__ float operator()(float y, float dy) const { return y > 0.f && y < 6.f ? dy : 0.f; }
};

}  // namespace

template <typename T>
void relu6_forward(Context& ctx, size_t count, const T* x, T* y) {
  elementwise::launch(ctx, count, Relu6{}, x, x, y);
}

template <typename T>
void relu6_backward(Context& ctx, size_t count, const T* y, const T* dy, T* dx) {
  elementwise::launch(ctx, count, Relu6Grad{}, y, dy, dx);
}

template void relu6_forward<float>(Context&, size_t, const float*, float*);
template void relu6_forward<bf16>(Context&, size_t, const bf16*, bf16*);
template void relu6_backward<float>(Context&, size_t, const float*, const float*, float*);
template void relu6_backward<bf16>(Context&, size_t, const bf16*, const bf16*, bf16*);

}  // namespace convoy::gpu

namespace convoy {
namespace {

using gpu::as;
using gpu::bf16;
using gpu::GpuLayer;

template <typename T>
void relu6_fwd(const GpuLayer& l) {
  gpu::relu6_forward(l.ctx, l.count(), l.xs<T>(), as<T>(l.buf.y));
}

template <typename T>
void relu6_bwd(const GpuLayer& l) {
  if (l.dx) gpu::relu6_backward(l.ctx, l.count(), as<T>(l.buf.y), as<T>(l.buf.dy), l.grad_to<T>());
}

}  // namespace

void Relu6Op::gpu_forward(const GpuLayer& l) const { l.half ? relu6_fwd<bf16>(l) : relu6_fwd<float>(l); }
void Relu6Op::gpu_backward(const GpuLayer& l, int) const { l.half ? relu6_bwd<bf16>(l) : relu6_bwd<float>(l); }

}  // namespace convoy
