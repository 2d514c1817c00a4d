// CUDA twin of batchnorm.cpp through cuDNN's spatial batch norm, which keeps the same saved
// statistics (mean, 1/sqrt(var + eps)) and the same unbiased running-variance update. Then the
// batch_norm op's passes, bf16 ones (batchnorm_nhwc.cu) with the ReLU after it where it runs that.
#include <cmath>
#include <type_traits>

#include "train/cuda/gpu_context.h"
#include "train/layers/batchnorm.h"
#include "train/layers/gpu_layer.h"

namespace convoy::gpu {
namespace {

// The data and per-channel descriptors for one call; creating them is host work only.
struct BnDescriptors {
  cudnnTensorDescriptor_t x = nullptr, param = nullptr;
  explicit BnDescriptors(const BnShape& s) {
    CONVOY_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
    CONVOY_CUDNN_CHECK(cudnnCreateTensorDescriptor(&param));
    // Spatial batch norm reduces over N, H and W alike, so the plane can be given as hw x 1.
    CONVOY_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, s.n, s.c, s.hw, 1));
    CONVOY_CUDNN_CHECK(cudnnSetTensor4dDescriptor(param, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, s.c, 1, 1));
  }
  ~BnDescriptors() {
    if (param) cudnnDestroyTensorDescriptor(param);
    if (x) cudnnDestroyTensorDescriptor(x);
  }
  BnDescriptors(const BnDescriptors&) = delete;
  BnDescriptors& operator=(const BnDescriptors&) = delete;
};

}  // namespace

void bn_forward_train(Context& ctx, const BnShape& s, const float* x, const float* gamma, const float* beta, float* y,
                      float* save_mean, float* save_invstd, float* running_mean, float* running_var) {
  BnDescriptors d(s);
  const float one = 1.f, zero = 0.f;
  CONVOY_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(ctx.cudnn(), CUDNN_BATCHNORM_SPATIAL, &one, &zero, d.x, x,
                                                            d.x, y, d.param, gamma, beta, s.momentum, running_mean,
                                                            running_var, s.eps, save_mean, save_invstd));
}

void bn_forward_eval(Context& ctx, const BnShape& s, const float* x, const float* gamma, const float* beta,
                     const float* running_mean, const float* running_var, float* y) {
  BnDescriptors d(s);
  const float one = 1.f, zero = 0.f;
  CONVOY_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(ctx.cudnn(), CUDNN_BATCHNORM_SPATIAL, &one, &zero, d.x, x,
                                                             d.x, y, d.param, gamma, beta, running_mean, running_var,
                                                             s.eps));
}

void bn_backward(Context& ctx, const BnShape& s, const float* x, const float* dy, const float* gamma,
                 const float* save_mean, const float* save_invstd, float* dx, float* dgamma, float* dbeta) {
  BnDescriptors d(s);
  const float one = 1.f, zero = 0.f;
  float* out = dx;
  if (!out) {  // the first layer needs no input gradient, but cuDNN always writes one
    if (ctx.workspace_bytes() < size_t(s.n) * s.c * s.hw * sizeof(float))
      fail("batch norm backward: the GPU workspace is too small for the input gradient");
    out = static_cast<float*>(ctx.workspace());
  }
  CONVOY_CUDNN_CHECK(cudnnBatchNormalizationBackward(ctx.cudnn(), CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero,
                                                     d.x, x, d.x, dy, d.x, out, d.param, gamma, dgamma, dbeta, s.eps,
                                                     save_mean, save_invstd));
}

}  // namespace convoy::gpu

namespace convoy {
namespace {

using gpu::as;
using gpu::bf16;
using gpu::GpuLayer;

BnShape shape_of(const GpuLayer& l) {
  const BnParams& p = params_of<BnParams>(l.node.spec);
  const Dims in = l.in();
  return {l.n(), in.c, in.h * in.w, p.eps, p.momentum};
}

template <typename T>
void bn_fwd(const GpuLayer& l) {
  const BnShape s = shape_of(l);
  float* run = l.state;
  float* aux = as<float>(l.buf.aux);
  if constexpr (std::is_same_v<T, bf16>) {
    float2* scale_shift = l.buf.scale_shift.get();
    if (l.batch.train)
      gpu::bn_scale_shift_train(l.ctx, s, l.xs<T>(), l.w32, l.b, aux, aux + s.c, run, run + s.c, scale_shift);
    else
      gpu::bn_scale_shift_eval(l.ctx, s, l.w32, l.b, run, run + s.c, scale_shift);
    if (l.defer) return;  // the consumer applies scale_shift as it reads x
    if (l.relu6 && !l.relu_bits) fail("batch norm: a fused ReLU6 needs its clip's bits");
    gpu::bn_apply(l.ctx, s, l.xs<T>(), scale_shift, l.relu ? as<T>(l.relu->y) : as<T>(l.buf.y), l.relu != nullptr,
                  l.relu ? l.relu_bits : nullptr, l.relu6 ? 6.f : INFINITY);
  } else if (l.batch.train) {
    gpu::bn_forward_train(l.ctx, s, l.xs<T>(), l.w32, l.b, as<T>(l.buf.y), aux, aux + s.c, run, run + s.c);
  } else {
    gpu::bn_forward_eval(l.ctx, s, l.xs<T>(), l.w32, l.b, run, run + s.c, as<T>(l.buf.y));
  }
}

// With the ReLU after it (bf16), the gradient is the ReLU's, masked by the ReLU's output; when the
// output was deferred with its ReLU, the consumer's backward pass already left the clipped
// elements' gradient zero. A deferred output's gradient may sit in another node's dy, its sums
// already taken by the consumer (GpuLayer::dy_from, sums_taken).
template <typename T>
void bn_bwd(const GpuLayer& l) {
  const BnShape s = shape_of(l);
  const float* aux = as<float>(l.buf.aux);
  T* dx = l.grad_to<T>();
  if constexpr (std::is_same_v<T, bf16>) {
    if (l.relu && !l.defer) {
      gpu::bn_backward(l.ctx, s, l.xs<T>(), as<T>(l.relu->dy), l.w32, aux, aux + s.c, dx, l.dw, l.db, as<T>(l.relu->y),
                       l.relu_bits);
    } else {
      const T* dy = l.dy_from ? static_cast<const T*>(l.dy_from) : as<T>(l.relu ? l.relu->dy : l.buf.dy);
      gpu::bn_backward(l.ctx, s, l.xs<T>(), dy, l.w32, aux, aux + s.c, dx, l.dw, l.db, nullptr, nullptr, l.sums_taken);
    }
  } else {
    gpu::bn_backward(l.ctx, s, l.xs<T>(), as<T>(l.buf.dy), l.w32, aux, aux + s.c, dx, l.dw, l.db);
  }
}

}  // namespace

void BatchNormOp::gpu_setup(gpu::GpuSetup& s) const {
  const size_t c = size_t(s.node.in_dims[0].c);
  s.arena.request(s.buf.aux, 2 * c * sizeof(float));
  if (s.half) s.arena.request(s.buf.scale_shift, c);
}
void BatchNormOp::gpu_forward(const GpuLayer& l) const { l.half ? bn_fwd<bf16>(l) : bn_fwd<float>(l); }
void BatchNormOp::gpu_backward(const GpuLayer& l, int) const { l.half ? bn_bwd<bf16>(l) : bn_bwd<float>(l); }

}  // namespace convoy
