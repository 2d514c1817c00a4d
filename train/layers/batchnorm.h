// Batch normalisation (per channel over n, h, w), with batch statistics in training and running
// statistics in evaluation: the CPU reference over NCHW (batchnorm.cpp) and its CUDA twins, fp32
// NCHW through cuDNN (batchnorm.cu) and bf16 NHWC with own kernels (batchnorm_nhwc.cu).
#pragma once
#include <cstddef>

#if CONVOY_HAVE_CUDA
#include "train/cuda/storage.h"
#endif

namespace convoy {

struct BnShape {
  int n = 0, c = 0, hw = 1;  // hw = 1 after a fully connected layer
  float eps = 1e-5f, momentum = 0.1f;  // running = (1 - momentum) * running + momentum * batch
};

// Saves the batch mean and 1/sqrt(var + eps) per channel for the backward pass and updates the
// running mean and (unbiased) variance.
void bn_forward_train(const BnShape& s, const float* x, const float* gamma, const float* beta,
                      float* y, float* save_mean, float* save_invstd, float* running_mean,
                      float* running_var);
void bn_forward_eval(const BnShape& s, const float* x, const float* gamma, const float* beta,
                     const float* running_mean, const float* running_var, float* y);
// dgamma and dbeta are overwritten; dx may be null.
void bn_backward(const BnShape& s, const float* x, const float* dy, const float* gamma,
                 const float* save_mean, const float* save_invstd, float* dx, float* dgamma,
                 float* dbeta);

}  // namespace convoy

#if CONVOY_HAVE_CUDA
namespace convoy::gpu {

class Context;

// fp32 NCHW through cuDNN.
void bn_forward_train(Context& ctx, const BnShape& s, const float* x, const float* gamma, const float* beta,
                      float* y, float* save_mean, float* save_invstd, float* running_mean, float* running_var);
void bn_forward_eval(Context& ctx, const BnShape& s, const float* x, const float* gamma, const float* beta,
                     const float* running_mean, const float* running_var, float* y);
void bn_backward(Context& ctx, const BnShape& s, const float* x, const float* dy, const float* gamma,
                 const float* save_mean, const float* save_invstd, float* dx, float* dgamma, float* dbeta);
// bf16 NHWC ([n, hw, c]) with own kernels: statistics, scale, shift and the parameter gradients in
// fp32, every sum in a fixed order; the same saved and running statistics as the fp32 overloads.
// With `relu` the forward pass stores max(0, y): batch norm and the ReLU after it in one pass. The
// backward pass of that pair takes the ReLU's output as relu_y and its gradient as dy.
void bn_forward_train(Context& ctx, const BnShape& s, const bf16* x, const float* gamma, const float* beta, bf16* y,
                      float* save_mean, float* save_invstd, float* running_mean, float* running_var,
                      bool relu = false);
void bn_forward_eval(Context& ctx, const BnShape& s, const bf16* x, const float* gamma, const float* beta,
                     const float* running_mean, const float* running_var, bf16* y, bool relu = false);
void bn_backward(Context& ctx, const BnShape& s, const bf16* x, const bf16* dy, const float* gamma,
                 const float* save_mean, const float* save_invstd, bf16* dx, float* dgamma, float* dbeta,
                 const bf16* relu_y = nullptr);

}  // namespace convoy::gpu
#endif
