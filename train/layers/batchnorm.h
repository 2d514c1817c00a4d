// The batch_norm op (`type = "batch_norm"`, per channel over n, h, w), with batch statistics in
// training and running statistics in evaluation: the CPU reference over NCHW (batchnorm.cpp) and
// its CUDA twins, fp32 NCHW through cuDNN (batchnorm.cu) and bf16 NHWC with own kernels (batchnorm_nhwc.cu).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "train/layers/op.h"

#if CONVOY_HAVE_CUDA
#include "train/cuda/storage.h"
#endif

namespace convoy {

struct BnShape {
  int n = 0, c = 0, hw = 1;            // hw = 1 after a fully connected layer
  float eps = 1e-5f, momentum = 0.1f;  // running = (1 - momentum) * running + momentum * batch
};

// Saves the batch mean and 1/sqrt(var + eps) per channel for the backward pass and updates the
// running mean and (unbiased) variance.
void bn_forward_train(const BnShape& s, const float* x, const float* gamma, const float* beta, float* y,
                      float* save_mean, float* save_invstd, float* running_mean, float* running_var);
void bn_forward_eval(const BnShape& s, const float* x, const float* gamma, const float* beta, const float* running_mean,
                     const float* running_var, float* y);
// dgamma and dbeta are overwritten; dx may be null.
void bn_backward(const BnShape& s, const float* x, const float* dy, const float* gamma, const float* save_mean,
                 const float* save_invstd, float* dx, float* dgamma, float* dbeta);

struct BnParams : OpParams {
  float eps = 1e-5f, momentum = 0.1f;
};

// Parameters gamma and beta, state the running mean and variance, aux the batch mean and 1/std.
class BatchNormOp final : public Op {
 public:
  const char* type() const override { return "batch_norm"; }
  bool is_norm() const override { return true; }
  std::vector<std::string> keys() const override { return {"eps", "momentum"}; }
  std::shared_ptr<const OpParams> parse(const LayerKeys& k) const override;
  OpFusion fusion(const Node& nd) const override;
  OpShape shape(const ShapeIn& in) const override;
  const char* weight_name() const override { return "gamma"; }
  const char* bias_name() const override { return "beta"; }
  bool init_params(const Node& nd, float* weights, float* state) const override;
  CpuBuffers cpu_buffers(const Node& nd, int n) const override;
  double forward(const CpuLayer& l) const override;
  void backward(const CpuLayer& l, int k) const override;
#if CONVOY_HAVE_CUDA
  void gpu_setup(gpu::GpuSetup& s) const override;
  void gpu_forward(const gpu::GpuLayer& l) const override;
  void gpu_backward(const gpu::GpuLayer& l, int k) const override;
#endif
};
const Op& batch_norm_op();

}  // namespace convoy

#if CONVOY_HAVE_CUDA
namespace convoy::gpu {

class Context;

// fp32 NCHW through cuDNN.
void bn_forward_train(Context& ctx, const BnShape& s, const float* x, const float* gamma, const float* beta, float* y,
                      float* save_mean, float* save_invstd, float* running_mean, float* running_var);
void bn_forward_eval(Context& ctx, const BnShape& s, const float* x, const float* gamma, const float* beta,
                     const float* running_mean, const float* running_var, float* y);
void bn_backward(Context& ctx, const BnShape& s, const float* x, const float* dy, const float* gamma,
                 const float* save_mean, const float* save_invstd, float* dx, float* dgamma, float* dbeta);
// bf16 NHWC ([n, hw, c]) with own kernels: statistics, scale, shift and the parameter gradients in
// fp32, every sum in a fixed order; the same saved and running statistics as the fp32 overloads.
// With `relu` the forward pass stores max(0, y): batch norm and the ReLU after it in one pass. The
// backward pass of that pair takes the ReLU's output as relu_y and its gradient as dy. With
// sums_taken, the consumer that wrote dy also took its gradient sums there (BnGradSums): they are
// only finished. relu_bits: the ReLU's output signs (storage.cuh's positive_bits, a byte per
// 16-byte pack), written by bn_apply where given and read instead of relu_y's values.
void bn_forward_train(Context& ctx, const BnShape& s, const bf16* x, const float* gamma, const float* beta, bf16* y,
                      float* save_mean, float* save_invstd, float* running_mean, float* running_var, bool relu = false);
void bn_forward_eval(Context& ctx, const BnShape& s, const bf16* x, const float* gamma, const float* beta,
                     const float* running_mean, const float* running_var, bf16* y, bool relu = false);
void bn_backward(Context& ctx, const BnShape& s, const bf16* x, const bf16* dy, const float* gamma,
                 const float* save_mean, const float* save_invstd, bf16* dx, float* dgamma, float* dbeta,
                 const bf16* relu_y = nullptr, const uint8_t* relu_bits = nullptr, const float2* sums_taken = nullptr);
// The forward passes in two parts: per channel, y = x * scale + shift, with (scale, shift) from
// the batch (keeping the statistics as bn_forward_train does) or from the running statistics; then
// the pass that applies them, which a consumer taking a ChannelAffine input runs in its own instead.
void bn_scale_shift_train(Context& ctx, const BnShape& s, const bf16* x, const float* gamma, const float* beta,
                          float* save_mean, float* save_invstd, float* running_mean, float* running_var,
                          float2* scale_shift);
void bn_scale_shift_eval(Context& ctx, const BnShape& s, const float* gamma, const float* beta,
                         const float* running_mean, const float* running_var, float2* scale_shift);
// With relu, y = min(max(0, .), relu_max) (6 for a fused ReLU6), and relu_bits mark 0 < y < relu_max.
void bn_apply(Context& ctx, const BnShape& s, const bf16* x, const float2* scale_shift, bf16* y, bool relu,
              uint8_t* relu_bits = nullptr, float relu_max = INFINITY);

}  // namespace convoy::gpu
#endif
