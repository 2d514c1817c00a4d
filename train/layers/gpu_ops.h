// The CUDA twins of the CPU reference ops in train/layers/*.h: same shape structs, same
// semantics, device pointers, work queued on the context's stream. Each lives in <op>.cu beside
// its <op>.cpp (what only bf16 nets need has no CPU twin: batchnorm_nhwc.cu, layout_convert.cu,
// weight_copy.cu), and tests/gpu_test_layers.cu checks every one against its CPU reference.
#pragma once
#include <cuda_bf16.h>
#include <cudnn.h>

#include <cstddef>
#include <cstdint>

#include "train/gpu_context.h"
#include "train/layers/batchnorm.h"
#include "train/layers/conv.h"
#include "train/layers/dropout.h"
#include "train/layers/fc.h"
#include "train/layers/input_layout.h"
#include "train/layers/pool.h"

namespace convoy::gpu {

using bf16 = __nv_bfloat16;

// Where the (n, c, h, w) elements of an activation lie: fp32 and tf32 nets keep the CPU's NCHW;
// bf16 nets keep NHWC, the layout cuDNN's tensor-core convolutions read and write. Ops templated on
// the element type T take float (fp32 arithmetic, as before) or bf16 (fp32 arithmetic, each stored
// value rounded to bf16).
enum class Layout { nchw, nhwc };

// cuDNN descriptors and algorithms for one convolution shape, chosen once at set-up. Only
// deterministic algorithms are used, so a run's weights do not depend on scheduling. In a
// MathMode::bf16 context the tensors are bf16 NHWC, the filter bf16 [c_out, kh, kw, c_in / groups]
// and the accumulation fp32.
class ConvPlan {
 public:
  // need_dx: whether the input's gradient is ever asked for (not for the net's first layer).
  // c_stored (bf16 only, groups 1): x holds that many channels per pixel, shape.c_in real ones and
  // zeros after them, and w is [c_out, kh, kw, c_stored] with zero weights there too. cuDNN's
  // NHWC tensor-core kernels want whole 16-byte pixels; 3-channel images padded to 8 run the
  // first convolution several times faster than 3 channels do.
  // space_to_depth (with c_stored, stride 2, no input gradient): x is stored as InputLayout's block
  // 2 and w as [c_out, ceil(k/2), ceil(k/2), c_stored] (see filter_index in weight_copy.cuh).
  ConvPlan(Context& ctx, const ConvShape& shape, bool need_dx = true, int c_stored = 0,
           bool space_to_depth = false);
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
  bool bf16_ = false;
  int c_stored_ = 0;  // channels per pixel of x and w as stored (shape_.c_in / groups unless padded)
  int s2d_k_ = 0;     // space to depth: the kernel size k of the stride-2 convolution it computes
};

// The CUDA twin computes conv and ReLU as separate nodes: a ConvShape with relu set is refused.
void conv_forward(Context& ctx, const ConvPlan& plan, const float* x, const float* w, const float* b, float* y);
void conv_backward(Context& ctx, const ConvPlan& plan, const float* x, const float* w, const float* dy,
                   float* dx, float* dw, float* db);
// bf16 plans: x, y, dx, dy bf16 NHWC; w the bf16 weight copy (see WeightCopy); the bias b and the
// gradients dw (in the CPU's [c_out, c_in / groups, kh, kw] order) and db fp32. dw_scratch holds
// weight_count() bf16 values (cuDNN's filter gradient, before it is widened and reordered into dw).
void conv_forward(Context& ctx, const ConvPlan& plan, const bf16* x, const bf16* w, const float* b, bf16* y);
void conv_backward(Context& ctx, const ConvPlan& plan, const bf16* x, const bf16* w, const bf16* dy, bf16* dx,
                   float* dw, float* db, bf16* dw_scratch);

void fc_forward(Context& ctx, const FcShape& s, const float* x, const float* w, const float* b, float* y);
void fc_backward(Context& ctx, const FcShape& s, const float* x, const float* w, const float* dy, float* dx,
                 float* dw, float* db);
// bf16 inputs x [n, in] (in the CPU's NCHW flatten order) and w (the bf16 copy, [out, in]), fp32
// accumulation; y bf16, or fp32 for the logits. dy bf16, or fp32 (the logits' gradient, rounded into
// dy_scratch [n, out] for the products); dw and db are fp32.
template <typename Out>
void fc_forward(Context& ctx, const FcShape& s, const bf16* x, const bf16* w, const float* b, Out* y);
template <typename G>
void fc_backward(Context& ctx, const FcShape& s, const bf16* x, const bf16* w, const G* dy, bf16* dx, float* dw,
                 float* db, bf16* dy_scratch);

template <typename T>
void max_pool_forward(Context& ctx, const PoolShape& s, const T* x, T* y, int32_t* argmax,
                      Layout layout = Layout::nchw);
template <typename T>
void max_pool_backward(Context& ctx, const PoolShape& s, const T* dy, const int32_t* argmax, T* dx,
                       Layout layout = Layout::nchw);
template <typename T>
void avg_pool_forward(Context& ctx, const PoolShape& s, const T* x, T* y, Layout layout = Layout::nchw);
template <typename T>
void avg_pool_backward(Context& ctx, const PoolShape& s, const T* dy, T* dx, Layout layout = Layout::nchw);
template <typename T>
void global_avg_pool_forward(Context& ctx, int n, int c, int hw, const T* x, T* y, Layout layout = Layout::nchw);
template <typename T>
void global_avg_pool_backward(Context& ctx, int n, int c, int hw, const T* dy, T* dx, Layout layout = Layout::nchw);

template <typename T>
void relu_forward(Context& ctx, size_t count, const T* x, T* y);
template <typename T>
void relu_backward(Context& ctx, size_t count, const T* y, const T* dy, T* dx);
template <typename T>
void add_forward(Context& ctx, size_t count, const T* a, const T* b, T* y);
template <typename T>
void accumulate(Context& ctx, size_t count, const T* src, T* dst);
// y = max(0, a + b): a residual add and the ReLU after it in one pass. Its backward pass sends the
// ReLU's input gradient (y > 0 ? dy : 0) to both inputs' gradients da and db, each written or, with
// acc_*, added to (as accumulate); a null one is left out. Bit for bit the separate ops' results.
template <typename T>
void add_relu_forward(Context& ctx, size_t count, const T* a, const T* b, T* y);
template <typename T>
void add_relu_backward(Context& ctx, size_t count, const T* y, const T* dy, T* da, bool acc_a, T* db, bool acc_b);

// Per sample, [hw, c] (NHWC) to [c, hw] (NCHW) and back. The CPU flattens in NCHW order, so a bf16
// net reorders where a spatial tensor meets a flatten or fc, and fc weights keep the CPU's layout.
template <typename T>
void nhwc_to_nchw(Context& ctx, int n, int c, int hw, const T* x, T* y);
template <typename T>
void nchw_to_nhwc(Context& ctx, int n, int c, int hw, const T* x, T* y);
// y = x rounded to bf16 (to nearest, ties to even).
void round_to_bf16(Context& ctx, size_t count, const float* x, bf16* y);

// The per-step values the step's kernels read from device memory rather than from their launch
// arguments, so that one captured CUDA graph serves every step.
struct StepScalars {
  uint64_t key = 0;           // the step's random key (dropout)
  float lr = 0;               // learning rate
  float c1 = 1, c2 = 1;       // Adam's bias corrections 1 - beta^t
  // Written on the device by batch_metrics: the step's mean loss, and 1 when it is NaN or infinite
  // (on any rank, once GpuStep has all-reduced it), in which case the fused updates (and
  // restore_if_nonfinite) leave the weights and the optimiser state as they were.
  uint32_t nonfinite = 0;
  float loss = 0;
};
// The scalars of optimiser step t (t counts from 1) at learning rate lr.
StepScalars step_scalars(uint64_t key, double lr, double beta1, double beta2, long long t);

// key: device pointer to the step's key, xor-ed with the layer's salt as the CPU twin does;
// sample_keys is a device array of s.n keys; the mask equals the CPU twin's bit for bit (for bf16,
// the kept value 1 / (1 - p) rounded to bf16; products use it unrounded).
template <typename T>
void dropout_forward(Context& ctx, const DropoutShape& s, const uint64_t* key, uint64_t salt,
                     const uint64_t* sample_keys, const T* x, T* y, T* mask);
template <typename T>
void dropout_backward(Context& ctx, const DropoutShape& s, const T* mask, const T* dy, T* dx);

// loss (device, n floats) gets the per-sample loss; the mean is left to the caller so the step
// needs no host synchronisation. Logits and their gradient may be bf16; probs, the loss and the
// arithmetic are fp32.
template <typename T>
void softmax_xent_forward(Context& ctx, int n, int classes, const T* logits, const int* labels, float* probs,
                          float* loss);
template <typename T>
void softmax_xent_backward(Context& ctx, int n, int classes, const float* probs, const int* labels,
                           float grad_scale, T* dlogits);
// Adds the batch's loss sum, top-1 hits and sample count to acc[0..2] and stores its mean loss in
// acc[3], in a fixed order (one block), so the figures do not depend on scheduling. Top-1 counts
// as the trainer's count_correct does: no class above the label's probability, ties to the lower index.
// A batch whose loss sum is NaN or infinite adds nothing to acc[0..2]. With `step`, its mean loss
// and whether that is finite go to step->loss and step->nonfinite (see StepScalars).
void batch_metrics(Context& ctx, int n, int classes, const float* probs, const int* labels, const float* losses,
                   double* acc, StepScalars* step = nullptr);

// CUDA twin of Augmenter::normalize over a batch: the loader's uint8 HWC samples, each mirrored
// where flips[i] is set, to normalised samples in `layout` (NCHW as the CPU writes them, or NHWC);
// scale_shift holds the per-channel 1/std then -mean/std. A bf16 output is the CPU's float value
// rounded.
struct InputShape {
  int n = 0, c = 0, h = 0, w = 0;  // the loader's augmented uint8 HWC samples
  InputLayout packed{};  // NHWC: how the output is stored (c_stored 0: c channels per pixel, as is)
};
template <typename T>
void normalize_input(Context& ctx, const InputShape& s, const uint8_t* hwc, const uint8_t* flips,
                     const float* scale_shift, T* out, Layout layout = Layout::nchw);

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

// A conv's weights in the flat parameter buffer, [c_out, c, kh, kw] there (c = c_in / groups),
// which the bf16 copy holds in cuDNN's NHWC filter order [c_out, kh, kw, c]; rs = kh * kw.
// dest: where the segment starts in the copy (begin, unless it is padded); c_pad: channels per
// filter tap there (c, or more for a padded first convolution, whose extra weights stay zero);
// s2d_k: a space-to-depth first convolution's kernel size (0: none), see filter_index.
struct WeightSegment {
  size_t begin = 0, end = 0;
  int c = 0, rs = 0;
  size_t dest = 0;
  int c_pad = 0;
  int s2d_k = 0;
};
// The bf16 copy of the flat fp32 weights that a bf16 net computes with: the same offsets, the
// segments (device array, sorted, disjoint) reordered (and padded ones moved past the flat
// weights). An empty copy (w null) is not kept.
struct WeightCopy {
  bf16* w = nullptr;
  const WeightSegment* segments = nullptr;
  int count = 0;
};
// copy = the first n flat weights w, rounded and reordered.
void refresh_weight_copy(Context& ctx, size_t n, const float* w, const WeightCopy& copy);

// Fused over the flat parameter buffer; the same arithmetic as optimizer_update.cpp. The learning
// rate and Adam's bias corrections come from the device StepScalars; where its `nonfinite` is set,
// nothing is changed (the step is skipped). A non-empty copy is refreshed from the new weights in
// the same pass.
void sgd_update(Context& ctx, size_t n, float* w, const float* g, float* buf, const StepScalars* s, float momentum,
                bool nesterov, float weight_decay, const WeightCopy& copy = {});
void adam_update(Context& ctx, size_t n, float* w, const float* g, float* m, float* v, const StepScalars* s,
                 float beta1, float beta2, float eps, float weight_decay, bool decoupled,
                 const WeightCopy& copy = {});
// dst = src where s->nonfinite is set, else nothing: batch norm's running statistics, saved before
// the forward pass of a step whose update is skipped, put back.
void restore_if_nonfinite(Context& ctx, size_t n, float* dst, const float* src, const StepScalars* s);

}  // namespace convoy::gpu
