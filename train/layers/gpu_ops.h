// The CUDA twins of the CPU reference ops in train/layers/*.h: same shape structs, same
// semantics, device pointers, work queued on the context's stream. Each lives in <op>.cu beside
// its <op>.cpp, and tests/gpu_test_layers.cu checks every one against its CPU reference.
#pragma once
#include <cudnn.h>

#include <cstdint>

#include "train/gpu_context.h"
#include "train/layers/batchnorm.h"
#include "train/layers/conv.h"
#include "train/layers/dropout.h"
#include "train/layers/fc.h"
#include "train/layers/pool.h"

namespace convoy::gpu {

// cuDNN descriptors and algorithms for one convolution shape, chosen once at set-up. Only
// deterministic algorithms are used, so a run's weights do not depend on scheduling.
class ConvPlan {
 public:
  // need_dx: whether the input's gradient is ever asked for (not for the net's first layer).
  ConvPlan(Context& ctx, const ConvShape& shape, bool need_dx = true);
  ~ConvPlan();
  ConvPlan(const ConvPlan&) = delete;
  ConvPlan& operator=(const ConvPlan&) = delete;
  const ConvShape& shape() const { return shape_; }

  ConvShape shape_;
  cudnnTensorDescriptor_t x_ = nullptr, y_ = nullptr, bias_ = nullptr;
  cudnnFilterDescriptor_t w_ = nullptr;
  cudnnConvolutionDescriptor_t conv_ = nullptr;
  cudnnConvolutionFwdAlgo_t fwd_{};
  cudnnConvolutionBwdDataAlgo_t bwd_data_{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter_{};
  bool has_dx_ = true;
};

// The CUDA twin computes conv and ReLU as separate nodes: a ConvShape with relu set is refused.
void conv_forward(Context& ctx, const ConvPlan& plan, const float* x, const float* w, const float* b, float* y);
void conv_backward(Context& ctx, const ConvPlan& plan, const float* x, const float* w, const float* dy,
                   float* dx, float* dw, float* db);

void fc_forward(Context& ctx, const FcShape& s, const float* x, const float* w, const float* b, float* y);
void fc_backward(Context& ctx, const FcShape& s, const float* x, const float* w, const float* dy, float* dx,
                 float* dw, float* db);

void max_pool_forward(Context& ctx, const PoolShape& s, const float* x, float* y, int32_t* argmax);
void max_pool_backward(Context& ctx, const PoolShape& s, const float* dy, const int32_t* argmax, float* dx);
void avg_pool_forward(Context& ctx, const PoolShape& s, const float* x, float* y);
void avg_pool_backward(Context& ctx, const PoolShape& s, const float* dy, float* dx);
void global_avg_pool_forward(Context& ctx, int n, int c, int hw, const float* x, float* y);
void global_avg_pool_backward(Context& ctx, int n, int c, int hw, const float* dy, float* dx);

void relu_forward(Context& ctx, size_t count, const float* x, float* y);
void relu_backward(Context& ctx, size_t count, const float* y, const float* dy, float* dx);
void add_forward(Context& ctx, size_t count, const float* a, const float* b, float* y);
void accumulate(Context& ctx, size_t count, const float* src, float* dst);

// The per-step values the step's kernels read from device memory rather than from their launch
// arguments, so that one captured CUDA graph serves every step.
struct StepScalars {
  uint64_t key = 0;           // the step's random key (dropout)
  float lr = 0;               // learning rate
  float c1 = 1, c2 = 1;       // Adam's bias corrections 1 - beta^t
  float pad_ = 0;
};
// The scalars of optimiser step t (t counts from 1) at learning rate lr.
StepScalars step_scalars(uint64_t key, double lr, double beta1, double beta2, long long t);

// key: device pointer to the step's key, xor-ed with the layer's salt as the CPU twin does;
// sample_keys is a device array of s.n keys; the mask equals the CPU twin's bit for bit.
void dropout_forward(Context& ctx, const DropoutShape& s, const uint64_t* key, uint64_t salt,
                     const uint64_t* sample_keys, const float* x, float* y, float* mask);
void dropout_backward(Context& ctx, const DropoutShape& s, const float* mask, const float* dy, float* dx);

// loss (device, n floats) gets the per-sample loss; the mean is left to the caller so the step
// needs no host synchronisation.
void softmax_xent_forward(Context& ctx, int n, int classes, const float* logits, const int* labels,
                          float* probs, float* loss);
void softmax_xent_backward(Context& ctx, int n, int classes, const float* probs, const int* labels,
                           float grad_scale, float* dlogits);
// Adds the batch's loss sum, top-1 hits and sample count to acc[0..2] and stores its mean loss in
// acc[3], in a fixed order (one block), so the figures do not depend on scheduling. Top-1 counts
// as the trainer's count_correct does: no class above the label's probability, ties to the lower index.
void batch_metrics(Context& ctx, int n, int classes, const float* probs, const int* labels, const float* losses,
                   double* acc);

// CUDA twin of Augmenter::apply over a batch: stored uint8 HWC samples, each with its crop and
// flip (int32 triples top, left, flip), to normalised float CHW; scale_shift holds the per-channel
// 1/std then -mean/std.
struct AugmentShape {
  int n = 0, c = 0, h = 0, w = 0;  // stored samples
  int out_h = 0, out_w = 0, pad = 0;
};
void augment_forward(Context& ctx, const AugmentShape& s, const uint8_t* hwc, const int32_t* crops,
                     const float* scale_shift, float* chw);

void bn_forward_train(Context& ctx, const BnShape& s, const float* x, const float* gamma, const float* beta,
                      float* y, float* save_mean, float* save_invstd, float* running_mean, float* running_var);
void bn_forward_eval(Context& ctx, const BnShape& s, const float* x, const float* gamma, const float* beta,
                     const float* running_mean, const float* running_var, float* y);
void bn_backward(Context& ctx, const BnShape& s, const float* x, const float* dy, const float* gamma,
                 const float* save_mean, const float* save_invstd, float* dx, float* dgamma, float* dbeta);

// Fused over the flat parameter buffer; the same arithmetic as optimizer_update.cpp. The learning
// rate and Adam's bias corrections come from the device StepScalars.
void sgd_update(Context& ctx, size_t n, float* w, const float* g, float* buf, const StepScalars* s, float momentum,
                bool nesterov, float weight_decay);
void adam_update(Context& ctx, size_t n, float* w, const float* g, float* m, float* v, const StepScalars* s,
                 float beta1, float beta2, float eps, float weight_decay, bool decoupled);

}  // namespace convoy::gpu
