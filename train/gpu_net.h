// The CUDA backend's net: the same nodes, shapes and flat parameter layout as a CPU Net, each node
// run by its op's CUDA passes (train/layers/). Every buffer is allocated here, once, for the
// largest batch; the step itself allocates nothing.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "train/cuda/gpu_context.h"
#include "train/cuda/input_layout.h"
#include "train/cuda/storage.h"
#include "train/cuda/weight_copy.h"
#include "train/fusion_plan.h"
#include "train/layers/gpu_layer.h"
#include "train/net.h"

namespace convoy::gpu {

class GpuNet {
 public:
  // `net` gives the topology and the parameter layout; it must outlive this object. With an
  // arena, the buffers are requested from it and usable once its owner commits it; without one,
  // the net makes and commits its own. The context's math mode fixes how activations are stored:
  // fp32 NCHW, or (MathMode::bf16) bf16 NHWC with fp32 logits.
  // fold: how a bf16 net whose input only a stride-2 convolution of up to 4 channels reads stores
  // it (InputLayout); with InputFold::none, such input is padded to 8 channels.
  GpuNet(Context& ctx, const Net& net, int max_batch, Arena* arena = nullptr, InputFold fold = InputFold::patches);

  // Weights and running statistics in the CPU Net's flat layout (fp32 whatever the math mode).
  void upload(const std::vector<float>& weights, const std::vector<float>& state);
  void download(std::vector<float>& weights, std::vector<float>& state) const;

  // x: device [n, input dims] in the net's storage (see stores_bf16()); labels: device int32 [n]; key:
  // device pointer to the step's key and sample_keys: device [n] (dropout). Queues the forward pass
  // on the context's stream; per-sample losses stay on the device. Reads no host value that
  // changes from step to step, so the queued work can be captured once as a CUDA graph.
  void forward(int n, const void* x, const int32_t* labels, bool train, const uint64_t* key,
               const uint64_t* sample_keys);
  // Gradients of the mean loss of the last forward into grads() (fp32). After each node's
  // gradients are queued, `ready(lo, hi)` (if set) is told their range [lo, hi) of the flat
  // buffer; nodes come in reverse order, so the ranges move from the end of the buffer to its start.
  void backward(const std::function<void(size_t lo, size_t hi)>& ready = nullptr);

  // [data] progressive: runs at inputs of h x w from now on, the same channels and neither side
  // larger than the net as built, whose sizes every buffer has (Net::nodes_at refuses others).
  // input_layout() follows. Each size's node shapes are kept for the next time it comes.
  void set_input(int h, int w);

  // Whether activations, and so forward()'s input, are bf16 NHWC rather than fp32 NCHW.
  bool stores_bf16() const { return ctx_.bf16(); }
  // How forward()'s input is stored for a bf16 net, at the size set_input gave: its channels as
  // they are, or for a net whose input only convolutions read, 3 (or 2..7) padded with zeros to 8,
  // the width cuDNN's NHWC kernels run fast, or folded for the first convolution (its windows, at
  // stride 2 or, for small windows, 1; or 2x2 pixel blocks at stride 2). fp32 nets read plain NCHW (c_stored = c).
  const InputLayout& input_layout() const { return input_; }
  // A bf16 net multiplies with a bf16 copy of the weights. Pass weight_copy() to the fused
  // optimiser updates, which refresh it; after any other change of weights(), call
  // refresh_weight_copy(). Empty (and the call a no-op) for fp32 nets.
  const WeightCopy& weight_copy() const { return copy_; }
  void refresh_weight_copy();

  // Per-node forward/backward events (recorded inside a captured graph too): collect_profile adds
  // their times up once the step is complete (the next step records them again), and
  // move_profile_to hands the sums to the CPU net's profile.
  void set_profiling(bool on);
  void collect_profile();
  void move_profile_to(Net& into);

  float* weights() { return weights_.get(); }
  float* grads() { return grads_.get(); }
  float* state() { return state_.get(); }
  size_t state_count() const { return state_.size(); }  // at least 1: a net without statistics has an unused one
  size_t param_count() const { return weights_.size(); }
  const float* probs() const { return probs_.get(); }    // device [n, classes]
  const float* losses() const { return losses_.get(); }  // device [n]
  int classes() const { return net_.classes(); }

 private:
  // Set-up: how a bf16 net's input is stored and each node's buffers (its op's requests, and
  // what the fusion plan leaves it).
  struct Sizes {
    size_t copy = 0, dw16 = 0, dy16 = 0, scratch = 0;
  };
  static InputLayout choose_input_layout(const Net& net, bool half, InputFold fold);
  void set_up_node(Arena& a, int i, Sizes& sizes);
  // One node's pass as its op gets it (GpuLayer).
  GpuLayer layer(int i);
  void backward_node(int i);

  Context& ctx_;
  const Net& net_;
  int max_batch_;
  GpuBatch batch_;
  const void* x_ = nullptr;
  Arena own_arena_;
  DeviceBuffer<float> weights_, grads_, state_, probs_, losses_;
  DeviceBuffer<unsigned char> scratch_;
  // bf16 nets: the weight copy and its reordered segments, cuDNN's bf16 filter gradient before it
  // is widened, and the logits' gradient rounded for the fc products.
  DeviceBuffer<bf16> weights16_, dw16_, dy16_;
  DeviceBuffer<WeightSegment> segments_;
  std::vector<WeightSegment> host_segments_;
  WeightCopy copy_;
  std::vector<NodeBuffers> buf_;
  std::vector<std::unique_ptr<OpCache>> caches_;  // per node, made by its op when it needs one
  // Which passes run fused and where each gradient goes (train/fusion_plan.h); part_ is the
  // shared buffer of the gradient parts kept apart (FusionPlan::split).
  FusionPlan plan_;
  DeviceBuffer<unsigned char> part_;
  // The nodes the passes run (the net's as built, or shaped_'s at the size set_input gave), and the
  // input's layout at that size and as built.
  const std::vector<Node>* nodes_;
  std::map<std::pair<int, int>, std::vector<Node>> shaped_;  // by input height and width
  InputLayout input_, built_input_;
  std::vector<size_t> copy_at_;          // per node: where its weights start in weights16_ (w_off unless padded)
  std::unique_ptr<CudaEvent[]> events_;  // 4 per node when profiling: fwd start/end, bwd start/end
  std::vector<std::pair<double, double>> times_;  // per node: forward, backward seconds so far
};

}  // namespace convoy::gpu
