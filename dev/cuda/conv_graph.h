// Plain convolutions through cuDNN's graph API: the forward, backward-data and backward-filter passes
// of one bf16 NHWC shape (KRSC filters as conv.cu keeps them, fp32 compute), each searchable for engines.
#pragma once
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dev/cuda/cudnn_graph.h"

namespace convoy::gpu {

// x is NHWC [n, h, w, c], w [k, r, s, c] (conv.cu's filter order), y NHWC [n, p, q, k].
struct ConvGraphShape {
  int n = 0, h = 0, w = 0, c = 0;
  int k = 0, r = 1, s = 1, stride = 1, pad = 0;
  int p() const { return (h + 2 * pad - r) / stride + 1; }
  int q() const { return (w + 2 * pad - s) / stride + 1; }
  std::string text() const;  // "32x56x56x64 -> 3x3/1 pad 1 -> 64 (out 56x56)"
};

enum class ConvPass {
  forward,          // y = conv(x, w)
  backward_data,    // dx from dy and w
  backward_filter,  // dw from x and dy
};
const char* pass_name(ConvPass p);  // "fwd", "bwd-data", "bwd-filter"

// The tensor a pass writes may have a type of its own: the filter gradient in fp32, where cuDNN takes
// it, is the trainer's fp32 dw without conv.cu's bf16 scratch and widening pass.
struct ConvGraphTypes {
  cudnnDataType_t io = CUDNN_DATA_BFLOAT16;   // x, w, y and their gradients
  cudnnDataType_t out = CUDNN_DATA_BFLOAT16;  // the tensor the pass writes
};

// Device pointers of one run, named for the forward convolution: the pass reads two and writes the
// third (forward: y; backward data: x as dx, from y as dy; backward filter: w as dw, from y as dy).
struct ConvGraphTensors {
  void* x = nullptr;
  void* w = nullptr;
  void* y = nullptr;
};

// One pass's graph for one shape, or the reason cuDNN refused it (no throw). No plan is built until
// asked: pick() takes heuristics' first accepted configuration, search() lists them all, use() sets
// one of the search's as the plan run() queues.
class ConvGraphPlan {
 public:
  ConvGraphPlan(cudnnHandle_t h, ConvPass pass, const ConvGraphShape& shape, const ConvGraphTypes& types = {});
  const graph::Support& support() const { return support_; }
  bool built() const { return plan_.built(); }
  const graph::Plan& plan() const { return plan_; }
  ConvPass pass() const { return pass_; }
  const ConvGraphShape& shape() const { return shape_; }
  const ConvGraphTypes& types() const { return types_; }
  graph::Support pick(cudnnHandle_t h, int64_t max_workspace);
  graph::PlanSearch search(cudnnHandle_t h, int64_t max_workspace, const graph::SearchLimits& limits) const;
  void use(graph::Plan&& plan);
  // Queues the plan on `stream`; workspace holds plan().workspace_bytes().
  void run(cudnnHandle_t h, cudaStream_t stream, const ConvGraphTensors& t, void* workspace) const;

 private:
  graph::Support build(cudnnHandle_t h);
  ConvPass pass_;
  ConvGraphShape shape_;
  ConvGraphTypes types_;
  std::shared_ptr<const std::vector<graph::Descriptor>> parts_;  // the finalized graph last, if it was
  graph::Plan plan_;
  graph::Support support_;
};

}  // namespace convoy::gpu
