// What one kind of layer supplies to the net: its config keys, its shape rule, its CPU passes and
// its CUDA passes and buffers. Net, GpuNet and the config reader call these and never switch on kinds.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "train/net_node.h"

namespace convoy {

// The most inputs one layer takes (a concat's branches; the residual add takes two).
constexpr int kMaxInputs = 8;

class LayerKeys;  // layer_keys.h
#if CONVOY_HAVE_CUDA
namespace gpu {
struct GpuSetup;  // gpu_layer.h
struct GpuLayer;  // likewise

// How a node would read the net's input, were it its reader: GpuNet stores a bf16 net's input as
// its readers can take it (InputLayout), padded with zero channels when every reader can, folded
// (InputFold) when the only one can.
struct InputUse {
  bool padded = false;   // takes zero channels after the real ones
  int block_kernel = 0;  // > 0: a convolution of this kernel size at stride 1 or 2, which can take folded input
  int block_pad = 0;     // its zero padding
  int block_stride = 0;  // and its stride
};
}  // namespace gpu
#endif

// A layer's own settings as its op read them from the config (ConvParams, ...).
struct OpParams {
  virtual ~OpParams() = default;
};

// The settings of a layer whose op reads them into a P.
template <typename P>
const P& params_of(const LayerSpec& s) {
  return static_cast<const P&>(*s.params);
}

// "CxHxW", for messages.
std::string dims_text(Dims d);

// What a shape rule is given; fail() reports "<file>:<line>: layer '<name>': <why>".
struct ShapeIn {
  const LayerSpec& spec;
  const std::vector<Dims>& in;  // the inputs' dims, in `inputs` order
  int classes;                  // the dataset's classes (0: unknown)
  const std::string& path;      // the config file
  [[noreturn]] void fail(const std::string& why) const;
};

// What a shape rule gives: the output dims, how many weights, biases and state values (running
// statistics) the layer owns, and its forward FLOPs per image.
struct OpShape {
  Dims out;
  size_t weights = 0, biases = 0, state = 0;
  double flops = 0;
};

// Node::aux and Node::aux_i32 sizes an op keeps between the passes, for a batch of n.
struct CpuBuffers {
  size_t aux = 0, aux_i32 = 0;
};

// One node's forward pass, or its backward pass for one input, on the CPU: the node, its input
// and output buffers, its slices of the flat parameter, gradient and state buffers, and the batch.
struct CpuLayer {
  explicit CpuLayer(Node& nd) : node(nd) {}
  Node& node;
  int index = 0;  // the node's place in the net
  int n = 0;      // batch size
  bool train = false;
  const float* x[kMaxInputs] = {};         // the inputs
  float* y = nullptr;                      // the output
  const float *w = nullptr, *b = nullptr;  // weights; bias (null: none)
  float* state = nullptr;                  // running statistics
  uint64_t key = 0;                        // the step's random key (dropout salts it with index)
  const uint64_t* sample_keys = nullptr;   // per sample
  const int32_t* labels = nullptr;
  float *probs = nullptr, *losses = nullptr;  // the loss's outputs: [n, classes], [n]
  int classes = 0;
  float label_smoothing = 0;  // the loss's, in training (the recipe's label_smoothing)
  // Backward: the output's gradient, and where the input's gradient (null: not wanted) and the
  // parameters' gradients go; dw and db are overwritten, not added to.
  const float* dy = nullptr;
  float *dx = nullptr, *dw = nullptr, *db = nullptr;

  const Dims& in(int k = 0) const { return node.in_dims[size_t(k)]; }
  size_t count() const { return size_t(n) * node.out.size(); }  // output values of the batch
};

// bf16 values in one 16-byte pack of channels (kPack<bf16> in train/cuda/storage.cuh): the fused
// kernels that take a node's channels in whole packs want its channel count a multiple of it.
constexpr int kBf16ChannelPack = 8;

// What an op can do beyond its own pass, as the fusion plans ask it: the CPU net's (Net) and the
// CUDA net's (train/fusion_plan.h, whose rules decide from these where fusions apply). All false
// unless the op says otherwise.
struct OpFusion {
  bool relu = false;       // CPU: applies an only consumer's ReLU itself (a convolution)
  bool relu_bf16 = false;  // GPU, bf16 nets: likewise (batch norm, the residual add)
  // GPU, bf16 nets: also an only consumer's ReLU6 (batch norm), where the output's channels fill
  // 16-byte packs: the backward pass then reads the clip from the kept bits, never from the output.
  bool relu6_bf16 = false;
  // GPU, bf16 nets: whether it can leave its output as x * scale + shift per channel
  // (gpu::ChannelAffine) for an only consumer that takes inputs so (batch norm), and whether it
  // takes them (the residual add): the output is then never written nor read back. A node that
  // takes them with their ReLU (max pooling) also takes a deferring node's fused ReLU, and its
  // backward pass leaves no gradient where the ReLU clipped.
  bool defers_channel_affine = false;
  bool takes_channel_affine = false;
  bool takes_channel_affine_relu = false;
  // GPU: whether gpu_backward honours GpuLayer::dx_add, adding the input's gradient to dx in its
  // own pass (a convolution, through cuDNN's beta); else GpuNet adds it on from scratch.
  bool adds_to_dx = false;
  // GPU, bf16 nets: whether, running its ReLU, its backward pass can take the ReLU's output
  // gradient in two parts (NodeBuffers::dy and GpuLayer::relu_dy2) and sum them as it reads (the
  // residual add): a second consumer that would add its part inside its own pass (a convolution,
  // cuDNN's beta = 1, which runs slower kernels) then writes it apart instead.
  bool sums_relu_gradient_parts = false;
  // GPU, bf16 nets: whether, running its ReLU, it can write its input gradient once for both
  // inputs and take the gradient sums of the deferred batch norms among them as it writes (the
  // residual add): the batch norms then read their gradient from the other input's and only
  // finish their sums.
  bool takes_deferred_gradient_sums = false;
};

class Op {
 public:
  virtual ~Op() = default;

  // ---- config
  // `type = "..."` in a [[layer]] table.
  virtual const char* type() const = 0;
  // The keys it takes besides name, type and inputs; any other is refused.
  virtual std::vector<std::string> keys() const { return {}; }
  // Reads and checks those keys (mistakes name the file and line); null where it takes none.
  virtual std::shared_ptr<const OpParams> parse(const LayerKeys&) const { return nullptr; }
  // Keys for a small example layer of this type over a 4-channel 6x6 input (the op tests build
  // every registered op from it).
  virtual std::string example() const { return ""; }

  // ---- topology and shape
  virtual int arity() const { return 1; }            // inputs it takes (the fewest, where it takes more)
  virtual int max_arity() const { return arity(); }  // the most inputs it takes, at most kMaxInputs
  virtual bool is_loss() const { return false; }     // the last layer: probabilities and per-sample losses
  virtual bool is_relu() const { return false; }
  virtual bool is_relu6() const { return false; }  // min(max(x, 0), 6)
  // A normalisation (batch norm) whose weights are a per-channel scale: the recipe's
  // weight_decay_norm and zero_init_residual concern these.
  virtual bool is_norm() const { return false; }
  // The join of a residual block, its inputs the branch and the shortcut (the add).
  virtual bool joins_residual() const { return false; }
  // What node nd of it can do beyond its own pass: what the fusion plans ask (OpFusion above).
  virtual OpFusion fusion(const Node& /*nd*/) const { return {}; }
  // What of the layer asks for the dataset's class count (units = "classes"); empty: nothing.
  virtual std::string wants_classes(const LayerSpec&) const { return ""; }
  // Output dims, parameter and state counts and FLOPs, or fail() with what is wrong.
  virtual OpShape shape(const ShapeIn& in) const = 0;
  // Parameter block names: "<layer>.weight", "<layer>.bias" unless an op says otherwise.
  virtual const char* weight_name() const { return "weight"; }
  virtual const char* bias_name() const { return "bias"; }
  // Sets parameters and state that start at fixed values (batch norm) and returns true; false:
  // weights are drawn at random from the fan-in (weights / output channels) and biases too.
  virtual bool init_params(const Node&, float* /*weights*/, float* /*state*/) const { return false; }

  // ---- CPU
  virtual CpuBuffers cpu_buffers(const Node&, int /*n*/) const { return {}; }
  // Returns the mean loss for the loss, 0 otherwise.
  virtual double forward(const CpuLayer& l) const = 0;
  // The gradient for input k into l.dx (when set) and the parameters' gradients into l.dw, l.db.
  virtual void backward(const CpuLayer& l, int k) const = 0;

#if CONVOY_HAVE_CUDA
  // ---- CUDA: the same node on the GPU, fp32 NCHW or bf16 NHWC (GpuLayer::half)
  // In a bf16 net, whether its output may stay fp32 when only the loss reads it (the logits).
  virtual bool fp32_logits() const { return false; }
  // How it could read the net's input, were it the reader (GpuNet's choice of InputLayout).
  virtual gpu::InputUse input_use(const Node&) const { return {}; }
  // Device buffers beyond the output and its gradient, and its part of the bf16 weight copy.
  virtual void gpu_setup(gpu::GpuSetup&) const {}
  virtual void gpu_forward(const gpu::GpuLayer& l) const = 0;
  virtual void gpu_backward(const gpu::GpuLayer& l, int k) const = 0;
  // Computes every input's gradient in one pass and returns true (a residual add running its ReLU),
  // or returns false to have gpu_backward called per input.
  virtual bool gpu_backward_all(const gpu::GpuLayer&) const { return false; }
#endif
};

}  // namespace convoy
