// Net construction (shape inference with file:line errors), forward and backward, each node's work
// done by its op (train/layers/). A gradient that reaches a node from several consumers is summed;
// with a single consumer the op writes it in place.
#include "train/net.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <sstream>

#include "shared/error.h"
#include "shared/timer.h"
#include "train/layers/elementwise.h"

namespace convoy {
namespace {

// In double, since c * h * w of an unchecked Dims can pass 2^64.
bool within_limits(Dims d) {
  return d.c >= 1 && d.h >= 1 && d.w >= 1 && d.h <= kMaxTensorSide && d.w <= kMaxTensorSide &&
         double(d.c) * d.h * d.w <= double(kMaxTensorValues);
}

const std::string kLimitsText = "at most 2^31 - 1 values per image and 2^20 along a side";

// printf into a string as long as the values need: layer names, and a concat's list of them, have
// no bound, and a row cut at a fixed length lost its figures.
template <typename... A>
std::string formatted(const char* fmt, A... a) {
  std::string s(size_t(std::max(0, std::snprintf(nullptr, 0, fmt, a...))), '\0');
  std::snprintf(s.data(), s.size() + 1, fmt, a...);
  return s;
}

}  // namespace

Net::Net(const NetConfig& cfg, Dims input, int classes, size_t max_params) : cfg_(cfg), input_(input), built_(input) {
  if (!within_limits(input))
    fail_file(cfg_.path, "cannot build the net for input " + dims_text(input) + " (" + kLimitsText + ")");
  if (classes <= 0) classes = cfg_.classes;
  check_classes(classes);
  data_classes_ = classes;
  size_t wsize = 0, ssize = 0;
  for (const LayerSpec& spec : cfg_.layers) add_node(spec, classes, max_params, wsize, ssize);
  index_.clear();
  for (size_t i = 0; i + 1 < nodes_.size(); ++i)
    if (nodes_[i].consumers == 0)
      fail_at(nodes_[i].spec, "its output is never used (every layer must lead to the loss)");
  fuse_relus();
  if (cfg_.zero_init_residual) find_residual_norms();
  built_nodes_ = nodes_;
  weights_.assign(wsize, 0.f);
  grads_.assign(wsize, 0.f);
  state_.assign(ssize, 0.f);
}

void Net::fail_at(const LayerSpec& s, const std::string& why) const {
  fail_file(cfg_.path + ":" + std::to_string(s.line), "layer '" + s.name + "': " + why);
}

// Before any shape: a layer sized by the dataset's classes needs them.
void Net::check_classes(int classes) const {
  for (const LayerSpec& s : cfg_.layers) {
    const std::string what = s.op->wants_classes(s);
    if (!what.empty() && classes <= 0) fail_at(s, what + " needs a dataset (or [net] classes)");
  }
}

std::vector<int> Net::inputs_of(const LayerSpec& spec) const {
  std::vector<int> in;
  if (spec.inputs.empty()) in.push_back(int(nodes_.size()) - 1);
  for (const std::string& name : spec.inputs) {
    if (name == "data") {
      in.push_back(-1);
      continue;
    }
    auto it = index_.find(name);
    if (it == index_.end()) fail_at(spec, "input '" + name + "' is not an earlier layer (or 'data')");
    in.push_back(it->second);
  }
  const int lo = spec.op->arity(), hi = spec.op->max_arity(), got = int(in.size());
  if (got < lo || got > hi) {
    const std::string type = spec.op->type();
    if (lo == 1 && hi == 1) fail_at(spec, "takes exactly one input");
    if (lo == 2 && hi == 2) fail_at(spec, type + " needs exactly two inputs");
    fail_at(spec, type + " takes " + std::to_string(lo) + " to " + std::to_string(hi) + " inputs, not " +
                      std::to_string(got));
  }
  return in;
}

// The node's inputs, its shape by its op, then its ranges in the flat parameter and state buffers.
void Net::add_node(const LayerSpec& spec, int classes, size_t max_params, size_t& wsize, size_t& ssize) {
  Node nd;
  nd.spec = spec;
  nd.in = inputs_of(spec);
  for (int i : nd.in) nd.in_dims.push_back(i < 0 ? input_ : nodes_[i].out);
  const ShapeIn in{nd.spec, nd.in_dims, classes, cfg_.path};
  const OpShape shape = spec.op->shape(in);
  nd.out = shape.out;
  nd.w_count = shape.weights, nd.b_count = shape.biases, nd.s_count = shape.state;
  nd.flops = shape.flops;
  if (spec.op->is_loss()) classes_ = nd.in_dims[0].c;
  if (!within_limits(nd.out)) in.fail("output " + dims_text(nd.out) + " is beyond the limits (" + kLimitsText + ")");
  // Checked before any weight is allocated; each count is far below 2^64, so the sum cannot wrap.
  if (nd.w_count + nd.b_count > max_params - wsize)
    in.fail("the net would have " + std::to_string(wsize + nd.w_count + nd.b_count) +
            " parameters up to here, more than the limit of " + std::to_string(max_params));
  for (int i : nd.in)
    if (i >= 0) nodes_[i].consumers++;
  if (nd.w_count) {
    nd.w_off = wsize;
    blocks_.push_back({spec.name + "." + spec.op->weight_name(), wsize, nd.w_count});
    wsize += nd.w_count;
  }
  if (nd.b_count) {
    nd.b_off = wsize;
    blocks_.push_back({spec.name + "." + spec.op->bias_name(), wsize, nd.b_count});
    wsize += nd.b_count;
  }
  if (nd.s_count) {
    nd.s_off = ssize;
    ssize += nd.s_count;
  }
  index_[spec.name] = int(nodes_.size());
  nodes_.push_back(std::move(nd));
}

// A ReLU that is the only consumer of an op that can apply it (a conv) runs inside that op, with
// no extra pass over memory.
void Net::fuse_relus() {
  for (Node& nd : nodes_) {
    const int c = nd.in[0];
    if (cfg_.fuse && nd.op().is_relu() && c >= 0 && nodes_[c].op().fusion(nodes_[c]).relu && nodes_[c].consumers == 1) {
      nodes_[c].fused_relu = true;
      nd.alias = c;
    }
  }
}

// A join's inputs equally deep leave no way to tell its branch from its shortcut: refused rather
// than guessed.
void Net::find_residual_norms() {
  std::vector<int> depth(nodes_.size());
  auto depth_of = [&](int i) { return i < 0 ? 0 : depth[size_t(i)]; };
  for (size_t i = 0; i < nodes_.size(); ++i) {
    for (int k : nodes_[i].in) depth[i] = std::max(depth[i], depth_of(k));
    ++depth[i];
    if (!nodes_[i].op().joins_residual()) continue;
    const std::vector<int>& in = nodes_[i].in;
    const int deepest = *std::max_element(in.begin(), in.end(),
                                          [&](int a, int b) { return depth_of(a) < depth_of(b); });
    if (std::count_if(in.begin(), in.end(), [&](int k) { return depth_of(k) == depth_of(deepest); }) > 1)
      fail_at(nodes_[i].spec,
              "zero_init_residual: its inputs lie equally deep in the net, so which is the residual branch (whose "
              "last batch norm would start at 0) cannot be told");
    if (deepest >= 0 && nodes_[size_t(deepest)].op().is_norm()) residual_norms_.push_back(deepest);
  }
}

void Net::init_weights(uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (Node& nd : nodes_) {
    if (nd.op().init_params(nd, weights_.data(), state_.data())) continue;
    if (!nd.w_count) continue;
    const double fan_in = double(nd.w_count) / nd.out.c;
    const float bound = float(1 / std::sqrt(fan_in));
    std::uniform_real_distribution<float> u(-bound, bound);
    if (cfg_.init == InitRule::kaiming) {
      std::normal_distribution<float> g(0.f, float(std::sqrt(2 / fan_in)));
      for (size_t i = 0; i < nd.w_count; ++i) weights_[nd.w_off + i] = g(rng);
      std::fill(weights_.begin() + nd.b_off, weights_.begin() + nd.b_off + nd.b_count, 0.f);
      continue;
    }
    for (size_t i = 0; i < nd.w_count; ++i) weights_[nd.w_off + i] = u(rng);
    for (size_t i = 0; i < nd.b_count; ++i) weights_[nd.b_off + i] = u(rng);
  }
  for (int i : residual_norms_) {
    const Node& nd = nodes_[size_t(i)];
    std::fill(weights_.begin() + nd.w_off, weights_.begin() + nd.w_off + nd.w_count, 0.f);
  }
}

void Net::reserve(int n) {
  if (n <= capacity_) return;
  capacity_ = n;
  size_t scratch = 0;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    Node& nd = nodes_[i];
    const Node& built = built_nodes_[i];  // the largest shapes (set_input runs at smaller ones)
    const size_t count = size_t(n) * built.out.size();
    nd.y.assign(nd.alias >= 0 ? 0 : count, 0.f);
    nd.dy.assign(nd.alias >= 0 ? 0 : count, 0.f);
    const CpuBuffers keep = nd.op().cpu_buffers(built, n);
    if (keep.aux) nd.aux.assign(keep.aux, 0.f);
    if (keep.aux_i32) nd.aux_i32.assign(keep.aux_i32, 0);
    for (size_t k = 0; k < nd.in.size(); ++k)
      if (nd.in[k] < 0 || nodes_[nd.in[k]].consumers > 1)
        scratch = std::max(scratch, size_t(n) * built.in_dims[k].size());
  }
  scratch_.assign(scratch, 0.f);
  probs_.assign(size_t(n) * classes_, 0.f);
  losses_.assign(n, 0.f);
}

size_t Net::bytes_for(int n) const {
  size_t floats = 0, ints = 0, scratch = 0;
  for (const Node& nd : built_nodes_) {
    if (nd.alias < 0) floats += 2 * size_t(n) * nd.out.size();
    const CpuBuffers keep = nd.op().cpu_buffers(nd, n);
    floats += keep.aux;
    ints += keep.aux_i32;
    for (size_t k = 0; k < nd.in.size(); ++k)
      if (nd.in[k] < 0 || built_nodes_[nd.in[k]].consumers > 1)
        scratch = std::max(scratch, size_t(n) * nd.in_dims[k].size());
  }
  floats += scratch + size_t(n) * (classes_ + 1);
  return floats * sizeof(float) + ints * sizeof(int32_t);
}

// Each node's shape rule again, over the new input: the parameters (and so their layout) must come
// out as built, and no buffer may need to grow.
std::vector<Node> Net::nodes_at(Dims in) const {
  if (in.c != built_.c || in.h < 1 || in.w < 1 || in.h > built_.h || in.w > built_.w)
    fail_file(cfg_.path, "the net built for input " + dims_text(built_) + " cannot run at " + dims_text(in) +
                             " (the same channels, and neither side larger)");
  std::vector<Node> nodes = built_nodes_;
  for (size_t i = 0; i < nodes.size(); ++i) {
    Node& nd = nodes[i];
    for (size_t k = 0; k < nd.in.size(); ++k) nd.in_dims[k] = nd.in[k] < 0 ? in : nodes[size_t(nd.in[k])].out;
    const OpShape s = nd.op().shape(ShapeIn{nd.spec, nd.in_dims, data_classes_, cfg_.path});
    if (s.weights + s.biases != nd.w_count + nd.b_count || s.state != nd.s_count)
      fail_at(nd.spec, "its parameters depend on the input's size (" + std::to_string(s.weights + s.biases) +
                           " at input " + dims_text(in) + ", " + std::to_string(nd.w_count + nd.b_count) + " at " +
                           dims_text(built_) + " as built): the net runs at one size only (a global pool before " +
                           "the fc layers makes it run at any)");
    nd.out = s.out;
    nd.flops = s.flops;
    // The ops' kept buffers (dropout's mask, max pooling's argmax) follow their output's size.
    const Node& b = built_nodes_[i];
    if (nd.out.size() > b.out.size())
      fail_at(nd.spec, "its output at input " + dims_text(in) + " (" + dims_text(nd.out) + ") is larger than at " +
                           dims_text(built_) + " as built (" + dims_text(b.out) + ")");
  }
  return nodes;
}

void Net::set_input(Dims in) {
  if (in == input_) return;
  std::vector<Node> shaped = nodes_at(in);
  for (size_t i = 0; i < nodes_.size(); ++i) {
    nodes_[i].in_dims = std::move(shaped[i].in_dims);
    nodes_[i].out = shaped[i].out;
    nodes_[i].flops = shaped[i].flops;
  }
  input_ = in;
}

const float* Net::input_of(const Node& nd, int k) const {
  const int i = nd.in[k];
  if (i < 0) return x_;
  const Node& src = nodes_[i];
  return src.alias >= 0 ? nodes_[src.alias].y.data() : src.y.data();
}

CpuLayer Net::layer(int i) {
  Node& nd = nodes_[i];
  CpuLayer l(nd);
  l.index = i;
  l.n = n_;
  l.train = train_;
  for (size_t k = 0; k < nd.in.size(); ++k) l.x[k] = input_of(nd, int(k));
  l.y = nd.y.data();
  l.w = weights_.data() + nd.w_off;
  l.b = nd.b_count ? weights_.data() + nd.b_off : nullptr;
  l.state = state_.data() + nd.s_off;
  l.key = key_;
  l.sample_keys = sample_keys_;
  l.labels = labels_;
  l.probs = probs_.data();
  l.losses = losses_.data();
  l.classes = classes_;
  l.label_smoothing = float(cfg_.train.label_smoothing);
  l.dy = nd.dy.data();
  l.dw = grads_.data() + nd.w_off;
  l.db = nd.b_count ? grads_.data() + nd.b_off : nullptr;
  return l;
}

double Net::forward(int n, const float* x, const int32_t* labels, bool train, uint64_t key,
                    const uint64_t* sample_keys) {
  reserve(n);
  n_ = n;
  x_ = x;
  labels_ = labels;
  train_ = train;
  key_ = key;
  sample_keys_ = sample_keys;
  double loss = 0;
  Stopwatch clock;
  for (int i = 0; i < int(nodes_.size()); ++i) {
    Node& nd = nodes_[i];
    if (nd.alias >= 0) continue;  // computed by the op it is fused into
    if (profiling_) clock.reset();
    const double l = nd.op().forward(layer(i));
    if (nd.op().is_loss()) loss = l;
    if (profiling_) nd.t_fwd += clock.seconds();
  }
  return loss;
}

// Where the gradient for node `from`'s output goes: its own dy when this is its only consumer
// (written in place), else scratch that the caller then adds on.
float* Net::grad_target(int from) {
  if (from >= 0 && nodes_[from].consumers == 1) return grad(from);
  return scratch_.data();
}

void Net::backward(bool want_input_grad) {
  const int n = n_;
  if (want_input_grad) input_grad_.assign(size_t(n) * input_.size(), 0.f);
  for (Node& nd : nodes_)
    for (int i : nd.in)
      if (i >= 0 && nodes_[i].consumers > 1) std::fill(grad(i), grad(i) + size_t(n) * nodes_[i].out.size(), 0.f);

  Stopwatch clock;
  for (int idx = int(nodes_.size()) - 1; idx >= 0; --idx) {
    Node& nd = nodes_[idx];
    if (nd.alias >= 0) continue;  // its gradient already lands in the fused op's, which masks it
    if (profiling_) clock.reset();
    CpuLayer l = layer(idx);
    for (size_t k = 0; k < nd.in.size(); ++k) {
      const int from = nd.in[k];
      const size_t in_count = size_t(n) * nd.in_dims[k].size();  // inputs of a concat differ in size
      // The first layer's input gradient is skipped for the ops that can skip it.
      l.dx = from >= 0 || want_input_grad ? grad_target(from) : nullptr;
      nd.op().backward(l, int(k));
      if (!l.dx) continue;
      if (from < 0) {
        if (want_input_grad) accumulate(in_count, l.dx, input_grad_.data());
      } else if (nodes_[from].consumers > 1) {
        accumulate(in_count, l.dx, grad(from));
      }
    }
    if (profiling_) nd.t_bwd += clock.seconds();
  }
}

std::string Net::profile() const {
  std::ostringstream o;
  double f = 0, b = 0;
  for (const Node& nd : nodes_) f += nd.t_fwd, b += nd.t_bwd;
  o << formatted("%-16s %-16s %10s %10s %7s\n", "layer", "type", "fwd s", "bwd s", "share");
  for (const Node& nd : nodes_)
    o << formatted("%-16s %-16s %10.3f %10.3f %6.1f%%\n", nd.spec.name.c_str(), nd.op().type(), nd.t_fwd, nd.t_bwd,
                   100.0 * (nd.t_fwd + nd.t_bwd) / std::max(1e-9, f + b));
  return o.str();
}

double Net::flops_per_image() const {
  double f = 0;
  for (const Node& nd : nodes_) f += nd.flops;
  return f;
}

std::string Net::summary() const {
  std::ostringstream o;
  o << formatted("%-16s %-16s %-14s %-16s %12s %14s\n", "layer", "type", "output", "inputs", "params", "MFLOPs/img");
  o << formatted("%-16s %-16s %-14s %-16s %12s %14s\n", "data", "input", dims_text(input_).c_str(), "", "", "");
  size_t params = 0;
  for (const Node& nd : nodes_) {
    std::string ins;
    for (int i : nd.in) ins += (ins.empty() ? "" : ",") + (i < 0 ? std::string("data") : nodes_[i].spec.name);
    const size_t p = nd.w_count + nd.b_count;
    params += p;
    o << formatted("%-16s %-16s %-14s %-16s %12zu %14.3f\n", nd.spec.name.c_str(), nd.op().type(),
                   dims_text(nd.out).c_str(), ins.c_str(), p, nd.flops / 1e6);
  }
  o << formatted("total: %zu parameters, %.3f MFLOPs per image (forward)\n", params, flops_per_image() / 1e6);
  return o.str();
}

}  // namespace convoy
