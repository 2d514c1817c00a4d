// Convolution fused with batch norm's work through cuDNN's graph API: per-channel statistics in the
// convolution's epilogue, the previous batch norm's scale, bias and ReLU in its prologue, and finalize.
#pragma once
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dev/cuda/conv_graph.h"
#include "dev/cuda/cudnn_graph.h"
#include "train/cuda/storage.h"

namespace convoy::gpu {

// x, w and y as a plain convolution's (conv_graph.h), all of the plan's io_type (bf16, as the trainer
// runs, unless asked otherwise).
using FusedConvShape = ConvGraphShape;

enum class FusedPattern {
  conv_genstats,                  // y = conv(x, w); sum[k], sqsum[k] of y over n, p, q
  scale_bias_relu_conv_genstats,  // y = conv(relu(x * scale[c] + bias[c]), w); the same statistics
  // y = conv(relu(x * scale[c] + bias[c]), w), no statistics: the generic runtime fusion engine's
  // mainloop fusion, which takes bf16 on Hopper where the precompiled ConvBNfprop engine behind the
  // genstats patterns takes fp16 only (cuDNN's graph API guide, "Specialized Pre-Compiled Engines").
  scale_bias_relu_conv,
};
const char* pattern_name(FusedPattern p);
bool has_prologue(FusedPattern p);    // scale, bias and ReLU before the convolution
bool has_statistics(FusedPattern p);  // sum and sqsum of y

// The data types of one plan. cuDNN's samples of these patterns (cudnn-frontend's
// samples/cpp/convolution/fprop.cpp "SBRCS", samples/legacy_samples/fusion_sample.cpp
// run_bn_conv_gen_stat) all use fp16 I/O with fp16 scale and bias; the trainer runs bf16.
struct FusedConvTypes {
  cudnnDataType_t io = CUDNN_DATA_BFLOAT16;       // x, w, y
  cudnnDataType_t scale_bias = CUDNN_DATA_FLOAT;  // the prologue's per-channel scale and bias
  cudnnDataType_t stats_prec = CUDNN_DATA_FLOAT;  // genstats' math precision (frontend: the io type)
  std::string text() const;                       // "io bf16, scale/bias fp32, stats fp32"
};
const char* type_name(cudnnDataType_t t);  // "fp32", "bf16", "fp16"

// Device pointers of one run: x, w and y of the plan's io type, scale and bias (the prologue's, per
// input channel) of its scale_bias type; sum and sqsum are fp32 per output channel and are overwritten.
struct FusedConvTensors {
  const void* x = nullptr;
  const void* w = nullptr;
  void* y = nullptr;
  float* sum = nullptr;
  float* sqsum = nullptr;
  const void* scale = nullptr;
  const void* bias = nullptr;
};

// One pattern built for one shape, or the reason cuDNN gave for refusing it (no throw: a refused
// shape runs unfused instead). The plan is heuristics' first accepted pick; search() lists every
// configuration cuDNN builds for the same graph, and use() swaps one in (autotuning once per shape).
class FusedConvPlan {
 public:
  FusedConvPlan(cudnnHandle_t h, FusedPattern pattern, const FusedConvShape& shape, int64_t max_workspace,
                const FusedConvTypes& types = {});
  const graph::Support& support() const { return support_; }
  bool built() const { return plan_.built(); }
  const graph::EngineInfo& engine() const { return plan_.engine(); }
  int64_t workspace_bytes() const { return plan_.workspace_bytes(); }
  FusedPattern pattern() const { return pattern_; }
  const FusedConvShape& shape() const { return shape_; }
  const FusedConvTypes& types() const { return types_; }
  // Every plan cuDNN builds for this graph (graph::search_plans), each holding the graph's descriptors;
  // where the graph itself was refused, no plans and that reason.
  graph::PlanSearch search(cudnnHandle_t h, int64_t max_workspace, const graph::SearchLimits& limits) const;
  // Makes `plan` (one of search()'s) the one run() queues.
  void use(graph::Plan&& plan);
  // Queues the plan on `stream`; workspace holds workspace_bytes().
  void run(cudnnHandle_t h, cudaStream_t stream, const FusedConvTensors& t, void* workspace) const;

 private:
  graph::Support build(cudnnHandle_t h, int64_t max_workspace);
  FusedPattern pattern_;
  FusedConvShape shape_;
  FusedConvTypes types_;
  std::shared_ptr<const std::vector<graph::Descriptor>> parts_;  // the finalized graph last, if it was
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
