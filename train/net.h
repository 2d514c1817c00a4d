// The net built from a NetConfig: a list of nodes in config order, each owning its output and
// output-gradient buffers, with every parameter in one flat weights buffer (and one flat grads
// buffer) so that all-reduce, the optimiser and checkpoints each work on a single array.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "train/layers/op.h"
#include "train/net_config.h"
#include "train/net_node.h"

namespace convoy {

struct ParamBlock {
  std::string name;  // "<layer>.weight", "<layer>.bias", ...
  size_t offset = 0, count = 0;
};

// The largest net Net builds; beyond these a config is refused with one line naming the layer,
// rather than left to the allocator and to the int arithmetic of the ops (indices within an image,
// im2col rows, max-pool argmax): at most 2^31 - 1 parameters, and per image at most 2^31 - 1 values
// in any tensor and 2^20 along its height or width.
constexpr size_t kMaxNetParams = (size_t(1) << 31) - 1;
constexpr size_t kMaxTensorValues = (size_t(1) << 31) - 1;
constexpr int kMaxTensorSide = 1 << 20;

class Net {
 public:
  // Checks the topology against the input dims (errors name the config file and line).
  // `classes` sizes fc layers with units = "classes" (0: the config's [net] classes). A net with
  // more than `max_params` parameters is refused before its weights are allocated (fuzzing
  // passes less than the limit, to stay within its memory).
  Net(const NetConfig& cfg, Dims input, int classes = 0, size_t max_params = kMaxNetParams);

  // PyTorch's default initialisation (uniform +-1/sqrt(fan_in)); batch norm gamma 1, beta 0, and
  // 0 for the gamma of residual_norms().
  void init_weights(uint64_t seed);
  // With [net] zero_init_residual, the batch norms whose scale starts at 0: of each residual join,
  // the input deepest in the net (the most layers from its input) where that is a batch norm. The
  // shortcut is the shallower input, an identity or a projection (a convolution and its batch
  // norm), so this is the last batch norm of each block's branch, which torchvision zeroes.
  // Empty without the key.
  const std::vector<int>& residual_norms() const { return residual_norms_; }
  // Sizes every buffer for batches of n at the input the net was built for, the largest it runs
  // at (a smaller final eval batch, or a smaller input, reuses the buffers).
  void reserve(int n);
  // The bytes reserve(n) allocates (for a memory bound before any is allocated).
  size_t bytes_for(int n) const;

  // Inputs of other sizes ([data] progressive trains at smaller crops than it evaluates at): the
  // same parameters run at input `in` from now on, every node reshaped, the buffers kept. Throws
  // nodes_at's line where the net cannot.
  void set_input(Dims in);
  // The nodes shaped for input `in`, without buffers: what set_input(in) gives the net. Throws one
  // line where the net cannot run at `in`: other channels or a larger side than it was built
  // for; a layer whose shape rule refuses it (a kernel larger than its input); or a layer whose
  // parameter count would change (an fc layer after a flatten, where no global pool makes the
  // net independent of the input's size).
  std::vector<Node> nodes_at(Dims in) const;
  // The input and the nodes as built: the largest input, from which every buffer is sized.
  Dims built_input() const { return built_; }
  const std::vector<Node>& built_nodes() const { return built_nodes_; }

  // Runs the net on x [n, input dims]; returns the mean loss. In training, dropout draws its
  // mask from (key, sample_keys) and batch norm uses and updates batch statistics.
  double forward(int n, const float* x, const int32_t* labels, bool train, uint64_t key = 0,
                 const uint64_t* sample_keys = nullptr);
  // Gradients of the mean loss of the last forward into grads(); also into input_grad() when
  // want_input_grad is set (gradient checks).
  void backward(bool want_input_grad = false);

  const float* probs() const { return probs_.data(); }    // [n, classes] after forward
  const float* losses() const { return losses_.data(); }  // [n]
  int classes() const { return classes_; }
  Dims input_dims() const { return input_; }  // now (set_input); built_input() as built
  const std::vector<float>& input_grad() const { return input_grad_; }

  std::vector<float>& weights() { return weights_; }
  const std::vector<float>& weights() const { return weights_; }
  std::vector<float>& grads() { return grads_; }
  std::vector<float>& state() { return state_; }
  const std::vector<ParamBlock>& blocks() const { return blocks_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const NetConfig& config() const { return cfg_; }

  // Layers with output shapes, parameter counts and forward FLOPs per image.
  std::string summary() const;
  // Per-layer forward/backward seconds since profiling was switched on.
  void set_profiling(bool on) { profiling_ = on; }
  // Adds time measured elsewhere (the CUDA backend's events) to a node's profile.
  void add_profile(size_t node, double fwd, double bwd) { nodes_[node].t_fwd += fwd, nodes_[node].t_bwd += bwd; }
  std::string profile() const;
  double flops_per_image() const;

 private:
  // Construction: the layers' `units = "classes"` checked, a node per layer with its shape and
  // parameter ranges, then the ReLUs that the layer before them runs.
  [[noreturn]] void fail_at(const LayerSpec& s, const std::string& why) const;
  void check_classes(int classes) const;
  void add_node(const LayerSpec& spec, int classes, size_t max_params, size_t& wsize, size_t& ssize);
  void fuse_relus();
  void find_residual_norms();
  std::vector<int> inputs_of(const LayerSpec& spec) const;
  // One node's pass as its op gets it (CpuLayer).
  CpuLayer layer(int i);
  const float* input_of(const Node& node, int k) const;
  float* grad(int i) { return nodes_[i].alias >= 0 ? nodes_[nodes_[i].alias].dy.data() : nodes_[i].dy.data(); }
  float* grad_target(int from);

  NetConfig cfg_;
  Dims input_, built_;
  int data_classes_ = 0;  // the classes the shape rules were given (fc units = "classes")
  int classes_ = 0, n_ = 0, capacity_ = 0;
  const float* x_ = nullptr;
  const int32_t* labels_ = nullptr;
  bool train_ = false, profiling_ = false;
  uint64_t key_ = 0;
  const uint64_t* sample_keys_ = nullptr;
  std::vector<Node> nodes_;
  std::vector<Node> built_nodes_;     // nodes_ as built, without buffers
  std::map<std::string, int> index_;  // layer name -> node, while building
  std::vector<int> residual_norms_;
  std::vector<ParamBlock> blocks_;
  std::vector<float> weights_, grads_, state_, probs_, losses_, input_grad_, scratch_;
};

}  // namespace convoy
