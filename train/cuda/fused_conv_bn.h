// Convolution fused with batch norm's work through cuDNN's graph API: per-channel statistics in the
// convolution's epilogue, the previous batch norm's scale, bias and ReLU in its prologue, and finalize.
#pragma once
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdint>
#include <string>

#include "train/cuda/cudnn_graph.h"
#include "train/cuda/storage.h"

namespace convoy::gpu {

// x is bf16 NHWC [n, h, w, c], w bf16 [k, r, s, c] (conv.cu's filter order), y bf16 NHWC [n, p, q, k].
struct FusedConvShape {
  int n = 0, h = 0, w = 0, c = 0;
  int k = 0, r = 1, s = 1, stride = 1, pad = 0;
  int p() const { return (h + 2 * pad - r) / stride + 1; }
  int q() const { return (w + 2 * pad - s) / stride + 1; }
  std::string text() const;  // "32x56x56x64 -> 3x3/1 pad 1 -> 64"
};

enum class FusedPattern {
  conv_genstats,                  // y = conv(x, w); sum[k], sqsum[k] of y over n, p, q
  scale_bias_relu_conv_genstats,  // y = conv(relu(x * scale[c] + bias[c]), w); the same statistics
};
const char* pattern_name(FusedPattern p);

// Device pointers of one run. scale and bias (the prologue's, per input channel) are of the plan's
// scale_bias_type; sum and sqsum are fp32 per output channel and are overwritten.
struct FusedConvTensors {
  const bf16* x = nullptr;
  const bf16* w = nullptr;
  bf16* y = nullptr;
  float* sum = nullptr;
  float* sqsum = nullptr;
  const void* scale = nullptr;
  const void* bias = nullptr;
};

// One pattern built for one shape, or the reason cuDNN gave for refusing it (no throw: a refused
// shape runs unfused instead).
class FusedConvPlan {
 public:
  FusedConvPlan(cudnnHandle_t h, FusedPattern pattern, const FusedConvShape& shape, int64_t max_workspace,
                cudnnDataType_t scale_bias_type = CUDNN_DATA_FLOAT);
  const graph::Support& support() const { return support_; }
  bool built() const { return plan_.built(); }
  const graph::EngineInfo& engine() const { return plan_.engine(); }
  int64_t workspace_bytes() const { return plan_.workspace_bytes(); }
  FusedPattern pattern() const { return pattern_; }
  const FusedConvShape& shape() const { return shape_; }
  // Queues the plan on `stream`; workspace holds workspace_bytes().
  void run(cudnnHandle_t h, cudaStream_t stream, const FusedConvTensors& t, void* workspace) const;

 private:
  graph::Support build(cudnnHandle_t h, int64_t max_workspace);
  FusedPattern pattern_;
  FusedConvShape shape_;
  cudnnDataType_t scale_bias_type_;
  graph::Plan plan_;
  graph::Support support_;
};

// Batch norm's statistics finished from the sums: per channel, with m = count samples,
// mean = sum / m, var = sqsum / m - mean^2, saved_invstd = 1 / sqrt(var + eps), the running
// statistics moved by `momentum` towards the batch's, and the equivalent scale and bias
// (gamma * invstd, beta - mean * gamma * invstd) that the next convolution's prologue applies.
struct BnFinalizeTensors {
  const float *sum = nullptr, *sqsum = nullptr, *gamma = nullptr, *beta = nullptr;
  const float *running_mean_in = nullptr, *running_var_in = nullptr;
  float *running_mean_out = nullptr, *running_var_out = nullptr;
  float *saved_mean = nullptr, *saved_invstd = nullptr;
  void *eq_scale = nullptr, *eq_bias = nullptr;  // of the plan's eq_type
};

class BnFinalizePlan {
 public:
  BnFinalizePlan(cudnnHandle_t h, int c, int64_t max_workspace, cudnnDataType_t eq_type = CUDNN_DATA_FLOAT);
  const graph::Support& support() const { return support_; }
  bool built() const { return plan_.built(); }
  const graph::EngineInfo& engine() const { return plan_.engine(); }
  int64_t workspace_bytes() const { return plan_.workspace_bytes(); }
  void run(cudnnHandle_t h, cudaStream_t stream, const BnFinalizeTensors& t, int64_t count, double eps, double momentum,
           void* workspace) const;

 private:
  graph::Support build(cudnnHandle_t h, int64_t max_workspace);
  int c_;
  cudnnDataType_t eq_type_;
  graph::Plan plan_;
  graph::Support support_;
};

}  // namespace convoy::gpu
