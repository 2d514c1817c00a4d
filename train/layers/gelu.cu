// CUDA twin of gelu.cpp through the shared elementwise kernel (16-byte packs where the pointers
// allow), for fp32 or bf16 elements; then the gelu op's passes.
#include "train/cuda/elementwise_map.cuh"
#include "train/cuda/gpu_context.h"
#include "train/layers/gelu.h"
#include "train/layers/gpu_layer.h"

namespace convoy::gpu {
namespace {

constexpr float kSqrtHalf = 0.70710678118654752440f;    // 1 / sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;  // 1 / sqrt(2 pi)

struct Gelu {
  __device__ float operator()(float x, float) const { return 0.5f * x * (1.f + erff(x * kSqrtHalf)); }
};
struct GeluGrad {  // (x, dy)
  __device__ float operator()(float x, float dy) const {
    const float cdf = 0.5f * (1.f + erff(x * kSqrtHalf)), pdf = kInvSqrt2Pi * expf(-0.5f * x * x);
    return dy * (cdf + x * pdf);
  }
};

}  // namespace

template <typename T>
void gelu_forward(Context& ctx, size_t count, const T* x, T* y) {
  elementwise::launch(ctx, count, Gelu{}, x, x, y);
}

template <typename T>
void gelu_backward(Context& ctx, size_t count, const T* x, const T* dy, T* dx) {
  elementwise::launch(ctx, count, GeluGrad{}, x, dy, dx);
}

template void gelu_forward<float>(Context&, size_t, const float*, float*);
template void gelu_forward<bf16>(Context&, size_t, const bf16*, bf16*);
template void gelu_backward<float>(Context&, size_t, const float*, const float*, float*);
template void gelu_backward<bf16>(Context&, size_t, const bf16*, const bf16*, bf16*);

}  // namespace convoy::gpu

namespace convoy {
namespace {

using gpu::as;
using gpu::bf16;
using gpu::GpuLayer;

template <typename T>
void gelu_fwd(const GpuLayer& l) {
  gpu::gelu_forward(l.ctx, l.count(), l.xs<T>(), as<T>(l.buf.y));
}

template <typename T>
void gelu_bwd(const GpuLayer& l) {
  if (l.dx) gpu::gelu_backward(l.ctx, l.count(), l.xs<T>(), as<T>(l.buf.dy), l.grad_to<T>());
}

}  // namespace

void GeluOp::gpu_forward(const GpuLayer& l) const { l.half ? gelu_fwd<bf16>(l) : gelu_fwd<float>(l); }
void GeluOp::gpu_backward(const GpuLayer& l, int) const { l.half ? gelu_bwd<bf16>(l) : gelu_bwd<float>(l); }

}  // namespace convoy
