// The CUDA backend's net: the same nodes, shapes and flat parameter layout as a CPU Net, each node
// run by its op's CUDA passes (train/layers/). Every buffer is allocated here, once, for the
// largest batch; the step itself allocates nothing.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "train/cuda/input_layout.h"
#include "train/cuda/storage.h"
#include "train/cuda/weight_copy.h"
#include "train/gpu_context.h"
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

  // Whether activations, and so forward()'s input, are bf16 NHWC rather than fp32 NCHW.
  bool stores_bf16() const { return ctx_.bf16(); }
  // How forward()'s input is stored for a bf16 net: its channels as they are, or for a net whose
  // input only convolutions read, 3 (or 2..7) padded with zeros to 8, the width cuDNN's NHWC kernels
  // run fast, or folded for a stride-2 first convolution (its windows, or 2x2 pixel blocks). fp32
  // nets read plain NCHW (c_stored = c).
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
  size_t param_count() const { return weights_.size(); }
  const float* probs() const { return probs_.get(); }    // device [n, classes]
  const float* losses() const { return losses_.get(); }  // device [n]
  int classes() const { return net_.classes(); }

 private:
  // Set-up: how a bf16 net's input is stored, each node's buffers (its op's requests), which
  // ReLUs a bf16 net's batch norms and residual adds run themselves, which batch norms leave their
  // output to the residual add, and which consumer writes a gradient first.
  struct Sizes {
    size_t copy = 0, dw16 = 0, dy16 = 0, scratch = 0;
  };
  static InputLayout choose_input_layout(const Net& net, bool half, InputFold fold);
  void set_up_node(Arena& a, int i, Sizes& sizes);
  void fuse_relus();
  size_t split_gradient_sums();
  void defer_affines();
  void take_deferred_gradient_sums();
  bool gradient_kept_until(int b, int j, int m) const;
  void order_gradient_sums();
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
  // bf16 nets: an op that can (Op::fuses_relu_bf16: batch norm, residual add) runs the ReLU that is
  // its only consumer in the same pass: relu_of_[i] is that ReLU's node (-1 for none), and
  // fused_[j] marks a ReLU run by its input.
  std::vector<int> relu_of_;
  std::vector<bool> fused_;
  // bf16 nets: a node that can (Op::defers_channel_affine_bf16: batch norm) leaves its output as
  // scale and shift for an only consumer that takes inputs so (the residual add): deferred_[i]
  // marks it, and affine_in_[j][k] is the node whose output node j's input k is so (-1: none).
  std::vector<bool> deferred_;
  std::vector<std::array<int, kMaxInputs>> affine_in_;
  // bf16 nets: an add running its ReLU whose inputs include deferred batch norms without ReLUs
  // (Op::takes_deferred_gradient_sums_bf16) writes its input gradient once, into one input's dy,
  // and takes those batch norms' gradient sums: skip_grad_[j][k] marks the input gradient node j
  // leaves unwritten, grad_from_[m] the node whose dy holds batch norm m's gradient (-1: its own,
  // and only then is its dy stored), and sums_taken_[m] a batch norm whose sums are so taken.
  std::vector<std::array<bool, kMaxInputs>> skip_grad_;
  std::vector<int> grad_from_;
  std::vector<bool> sums_taken_;
  // Per node and input: whether the input's gradient already holds another consumer's part when
  // this node's backward pass comes (it is added to), or this node is the first to give it one (it
  // is written: no zeroing pass, no scratch).
  std::vector<std::array<bool, kMaxInputs>> adds_;
  // bf16 nets: per node and input, whether its gradient part goes to part_ instead of being added
  // to the input's dy, for a ReLU run by an op that sums the two parts as it reads them
  // (Op::sums_relu_gradient_parts_bf16); split_reader_[j] marks that op. part_ is shared: between
  // a part's writer and its reader no other part is written.
  std::vector<std::array<bool, kMaxInputs>> split_;
  std::vector<bool> split_reader_;
  DeviceBuffer<unsigned char> part_;
  InputLayout input_;
  std::vector<size_t> copy_at_;          // per node: where its weights start in weights16_ (w_off unless padded)
  std::unique_ptr<CudaEvent[]> events_;  // 4 per node when profiling: fwd start/end, bwd start/end
  std::vector<std::pair<double, double>> times_;  // per node: forward, backward seconds so far
};

}  // namespace convoy::gpu
