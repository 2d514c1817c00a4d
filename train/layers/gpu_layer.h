// What an op's CUDA passes get from GpuNet: a node's device buffers, its set-up (requests to the
// arena, its part of the bf16 weight copy) and the pointers of one forward or backward pass.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "train/cuda/channel_affine.h"
#include "train/cuda/gpu_context.h"
#include "train/cuda/input_layout.h"
#include "train/cuda/storage.h"
#include "train/cuda/weight_copy.h"
#include "train/layers/op.h"

namespace convoy::gpu {

// One node's device memory: its output (none where the node defers it, GpuLayer::defer) and the
// output's gradient, and what its op keeps between the passes in aux and aux2 (dropout mask,
// batch-norm statistics, max-pool argmax, an fc's input and input gradient in NCHW order).
struct NodeBuffers {
  DeviceBuffer<unsigned char> y, dy, aux, aux2;
  DeviceBuffer<float2> scale_shift;  // bf16, a node that can defer its output (OpFusion::defers_channel_affine)
  DeviceBuffer<float2> grad_sums;    // bf16, a deferred batch norm whose consumer takes its gradient sums
  DeviceBuffer<uint8_t> relu_bits;   // bf16, a node running its ReLU: the output's signs (GpuLayer::relu_bits)
  bool fp32 = true;                  // y and dy hold fp32: every node of an fp32 net, the logits of a bf16 one
};

// What an op keeps for a node from step to step (a convolution's cuDNN plans); GpuNet owns it.
struct OpCache {
  virtual ~OpCache() = default;
};

template <typename T>
T* as(const DeviceBuffer<unsigned char>& b) {
  return reinterpret_cast<T*>(b.get());
}

// dst = src, bytes long, queued on the context's stream.
inline void device_copy(Context& ctx, void* dst, const void* src, size_t bytes) {
  CONVOY_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ctx.stream()));
}

// One node's set-up, while GpuNet requests its buffers from the arena (they are usable once the
// arena is committed). The sizes below are shared by the whole net and only ever grow.
struct GpuSetup {
  Arena& arena;
  const Node& node;
  NodeBuffers& buf;
  bool half;  // a bf16 net
  int max_batch;
  const InputLayout& input;              // how the net's input is stored
  size_t& copy_at;                       // bf16: where the node's weights start in the weight copy (w_off unless moved)
  size_t& copy_size;                     // bf16: the weight copy's size (moved weights go after the flat ones)
  std::vector<WeightSegment>& segments;  // bf16: the copy's reordered segments
  size_t& dw16;                          // bf16: values of scratch for a filter gradient
  size_t& dy16;                          // bf16: values of scratch for the logits' gradient

  size_t count() const { return size_t(max_batch) * node.out.size(); }  // output values of a batch
  size_t elem() const { return buf.fp32 ? sizeof(float) : sizeof(bf16); }
};

// What every node's pass of one step may read: the batch, its labels and dropout keys (device
// pointers), and where the loss leaves its figures.
struct GpuBatch {
  int n = 0;
  bool train = false;
  const int32_t* labels = nullptr;
  const uint64_t* key = nullptr;
  const uint64_t* sample_keys = nullptr;
  float *probs = nullptr, *losses = nullptr;
  int classes = 0;
  float label_smoothing = 0;  // the loss's, in training (the recipe's label_smoothing)
};

// One node's forward pass, or its backward pass for one input, on the GPU. Activations are T =
// float (NCHW) or bf16 (NHWC, `half`); weights are given as the ops multiply with them (the fp32
// masters, or their bf16 copy) and as fp32 masters (batch norm's parameters, every bias).
struct GpuLayer {
  GpuLayer(Context& c, const Node& nd, int i, const GpuBatch& b, NodeBuffers& own, bool h, const InputLayout& inp,
           std::unique_ptr<OpCache>& oc)
      : ctx(c), node(nd), index(i), batch(b), buf(own), half(h), input(inp), cache(oc) {}
  Context& ctx;
  const Node& node;
  int index;  // the node's place in the net
  const GpuBatch& batch;
  NodeBuffers& buf;
  bool half;
  const InputLayout& input;
  std::unique_ptr<OpCache>& cache;
  const void* x[kMaxInputs] = {};            // the inputs: the net's input or nodes' outputs
  bool x_fp32[kMaxInputs] = {};              // input k is a node's fp32 output (a bf16 net's logits)
  void* x_grad[kMaxInputs] = {};             // the inputs' own gradients (null: the net's input)
  bool x_add[kMaxInputs] = {};               // ...which already hold another consumer's part: add to them
  const void* w = nullptr;                   // weights as multiplied: fp32 masters or the bf16 copy
  const float *w32 = nullptr, *b = nullptr;  // fp32 master weights; bias (null: none)
  float *dw = nullptr, *db = nullptr;        // their gradients (db null without a bias)
  float* state = nullptr;                    // running statistics
  NodeBuffers* relu = nullptr;               // bf16: the ReLU node this one runs itself (null: none)
  bool relu6 = false;                        // ...a ReLU6 (min(max(x, 0), 6)): the bits mark 0 < y < 6
  uint8_t* relu_bits = nullptr;              // ...whose output's signs it writes there, a byte per 16-byte pack,
                                             // for its backward pass to read instead of the output (null: none)
  const void* relu_dy2 = nullptr;            // ...and the second part of its gradient (GpuNet::split_; null: none)
  bool defer = false;                        // bf16: leave the output as a ChannelAffine in buf.scale_shift
  ChannelAffine affine[kMaxInputs];          // bf16: inputs left so by their nodes (x[k] then unwritten)
  BnGradSums grad_sums[kMaxInputs];          // bf16: ...whose gradient sums this node takes (part null: none)
  const void* dy_from = nullptr;             // bf16: the output's gradient, where another node's dy holds it
  const float2* sums_taken = nullptr;        // bf16: this batch norm's gradient sums, taken by its consumer
  bf16 *dw16 = nullptr, *dy16 = nullptr;     // bf16: shared scratch (see GpuSetup)
  void* dx = nullptr;                        // backward: where the input's gradient goes (null: none)
  bool dx_add = false;                       // ...added to what dx holds rather than written (OpFusion::adds_to_dx)

  int n() const { return batch.n; }
  const Dims& in(int k = 0) const { return node.in_dims[size_t(k)]; }
  size_t count() const { return size_t(batch.n) * node.out.size(); }  // output values of the batch
  Layout layout() const { return half ? Layout::nhwc : Layout::nchw; }
  template <typename T>
  const T* xs(int k = 0) const {
    return static_cast<const T*>(x[k]);
  }
  template <typename T>
  const T* weights() const {
    return static_cast<const T*>(w);
  }
  template <typename T>
  T* grad_to() const {
    return static_cast<T*>(dx);
  }
};

}  // namespace convoy::gpu
