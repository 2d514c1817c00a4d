// Batch normalisation over NCHW tensors (per channel over n, h, w), with batch statistics in
// training and running statistics in evaluation. Shared with the CUDA twin (batchnorm.cu).
#pragma once
#include <cstddef>

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
