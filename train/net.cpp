// Net construction (shape inference with file:line errors), forward and backward over the ops in
// train/layers/. A gradient that reaches a node from several consumers is summed; with a single
// consumer the op writes it in place.
#include "train/net.h"

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <sstream>

#include "shared/error.h"
#include "shared/timer.h"
#include "train/layers/batchnorm.h"
#include "train/layers/conv.h"
#include "train/layers/dropout.h"
#include "train/layers/elementwise.h"
#include "train/layers/fc.h"
#include "train/layers/pool.h"
#include "train/layers/softmax_xent.h"

namespace convoy {
namespace {

std::string dims_text(Dims d) {
  return std::to_string(d.c) + "x" + std::to_string(d.h) + "x" + std::to_string(d.w);
}

// In double, since c * h * w of an unchecked Dims can pass 2^64.
bool within_limits(Dims d) {
  return d.c >= 1 && d.h >= 1 && d.w >= 1 && d.h <= kMaxTensorSide && d.w <= kMaxTensorSide &&
         double(d.c) * d.h * d.w <= double(kMaxTensorValues);
}

const std::string kLimitsText = "at most 2^31 - 1 values per image and 2^20 along a side";

}  // namespace

ConvShape conv_shape(const Node& nd, Dims in, int n) {
  ConvShape s;
  s.n = n;
  s.c_in = in.c, s.h_in = in.h, s.w_in = in.w;
  s.c_out = nd.spec.filters;
  s.kh = s.kw = nd.spec.kernel;
  s.stride = nd.spec.stride, s.pad = nd.spec.pad, s.groups = nd.spec.groups;
  return s;
}

PoolShape pool_shape(const Node& nd, Dims in, int n) {
  PoolShape s;
  s.n = n;
  s.c = in.c, s.h_in = in.h, s.w_in = in.w;
  s.kh = s.kw = nd.spec.kernel;
  s.stride = nd.spec.stride, s.pad = nd.spec.pad;
  return s;
}

Net::Net(const NetConfig& cfg, Dims input, int classes, size_t max_params) : cfg_(cfg), input_(input) {
  if (!within_limits(input))
    fail_file(cfg_.path, "cannot build the net for input " + dims_text(input) + " (" + kLimitsText + ")");
  if (classes <= 0) classes = cfg_.classes;
  for (LayerSpec& s : cfg_.layers)
    if (s.kind == LayerKind::fc && s.units == kClassUnits) {
      if (classes <= 0) fail_file(cfg_.path + ":" + std::to_string(s.line), "layer '" + s.name + "': units = \"classes\" needs a dataset (or [net] classes)");
      s.units = classes;
    }
  std::map<std::string, int> index;
  auto fail_at = [&](const LayerSpec& s, const std::string& why) {
    fail_file(cfg_.path + ":" + std::to_string(s.line), "layer '" + s.name + "': " + why);
  };
  size_t wsize = 0, ssize = 0;
  for (const LayerSpec& spec : cfg_.layers) {
    Node nd;
    nd.spec = spec;
    const int self = int(nodes_.size());
    if (spec.inputs.empty()) {
      nd.in.push_back(self - 1);
    } else {
      for (const std::string& name : spec.inputs) {
        if (name == "data") {
          nd.in.push_back(-1);
          continue;
        }
        auto it = index.find(name);
        if (it == index.end()) fail_at(spec, "input '" + name + "' is not an earlier layer (or 'data')");
        nd.in.push_back(it->second);
      }
    }
    const bool two = spec.kind == LayerKind::add;
    if (two != (nd.in.size() == 2) || nd.in.size() > 2)
      fail_at(spec, two ? "add needs exactly two inputs" : "takes exactly one input");
    std::vector<Dims> ind;
    for (int i : nd.in) ind.push_back(i < 0 ? input_ : nodes_[i].out);
    const Dims in = ind[0];
    switch (spec.kind) {
      case LayerKind::conv: {
        if (in.c % spec.groups || spec.filters % spec.groups)
          fail_at(spec, "groups = " + std::to_string(spec.groups) + " must divide input channels (" +
                            std::to_string(in.c) + ") and filters (" + std::to_string(spec.filters) + ")");
        ConvShape s = conv_shape(nd, in, 1);
        if (in.h + 2 * spec.pad < spec.kernel || in.w + 2 * spec.pad < spec.kernel)
          fail_at(spec, "kernel " + std::to_string(spec.kernel) + " is larger than the padded input " + dims_text(in));
        nd.out = {spec.filters, s.h_out(), s.w_out()};
        nd.w_count = s.weight_count();
        nd.b_count = spec.bias ? size_t(spec.filters) : 0;
        nd.flops = 2.0 * double(nd.w_count) * s.h_out() * s.w_out();
        break;
      }
      case LayerKind::max_pool:
      case LayerKind::avg_pool: {
        PoolShape s = pool_shape(nd, in, 1);
        if (in.h + 2 * spec.pad < spec.kernel || in.w + 2 * spec.pad < spec.kernel)
          fail_at(spec, "kernel " + std::to_string(spec.kernel) + " is larger than the padded input " + dims_text(in));
        nd.out = {in.c, s.h_out(), s.w_out()};
        nd.flops = double(nd.out.size()) * spec.kernel * spec.kernel;
        break;
      }
      case LayerKind::global_avg_pool:
        nd.out = {in.c, 1, 1};
        nd.flops = double(in.size());
        break;
      case LayerKind::fc:
        nd.out = {spec.units, 1, 1};
        nd.w_count = size_t(spec.units) * in.size();
        nd.b_count = spec.bias ? size_t(spec.units) : 0;
        nd.flops = 2.0 * double(nd.w_count);
        break;
      case LayerKind::batch_norm:
        nd.out = in;
        nd.w_count = nd.b_count = size_t(in.c);
        nd.s_count = 2 * size_t(in.c);
        nd.flops = 2.0 * double(in.size());
        break;
      case LayerKind::add:
        if (!(ind[0] == ind[1]))
          fail_at(spec, "inputs have different shapes " + dims_text(ind[0]) + " and " + dims_text(ind[1]));
        nd.out = in;
        nd.flops = double(in.size());
        break;
      case LayerKind::flatten:
        nd.out = {int(in.size()), 1, 1};
        break;
      case LayerKind::softmax_xent:
        if (in.h != 1 || in.w != 1) fail_at(spec, "needs a flat input (fc output), got " + dims_text(in));
        nd.out = {1, 1, 1};
        classes_ = in.c;
        nd.flops = 4.0 * in.c;
        break;
      case LayerKind::relu:
      case LayerKind::dropout:
        nd.out = in;
        nd.flops = double(in.size());
        break;
    }
    if (!within_limits(nd.out))
      fail_at(spec, "output " + dims_text(nd.out) + " is beyond the limits (" + kLimitsText + ")");
    // Checked before any weight is allocated; each count is far below 2^64, so the sum cannot wrap.
    if (nd.w_count + nd.b_count > max_params - wsize)
      fail_at(spec, "the net would have " + std::to_string(wsize + nd.w_count + nd.b_count) +
                        " parameters up to here, more than the limit of " + std::to_string(max_params));
    for (int i : nd.in)
      if (i >= 0) nodes_[i].consumers++;
    if (nd.w_count) {
      nd.w_off = wsize;
      blocks_.push_back({spec.name + (spec.kind == LayerKind::batch_norm ? ".gamma" : ".weight"), wsize, nd.w_count});
      wsize += nd.w_count;
    }
    if (nd.b_count) {
      nd.b_off = wsize;
      blocks_.push_back({spec.name + (spec.kind == LayerKind::batch_norm ? ".beta" : ".bias"), wsize, nd.b_count});
      wsize += nd.b_count;
    }
    if (nd.s_count) {
      nd.s_off = ssize;
      ssize += nd.s_count;
    }
    index[spec.name] = self;
    nodes_.push_back(std::move(nd));
  }
  for (size_t i = 0; i + 1 < nodes_.size(); ++i)
    if (nodes_[i].consumers == 0)
      fail_at(nodes_[i].spec, "its output is never used (every layer must lead to the loss)");
  // A ReLU that is a conv's only consumer runs inside the conv (no extra pass over memory).
  for (size_t i = 0; i < nodes_.size(); ++i) {
    Node& nd = nodes_[i];
    const int c = nd.in[0];
    if (cfg_.fuse && nd.spec.kind == LayerKind::relu && c >= 0 && nodes_[c].spec.kind == LayerKind::conv &&
        nodes_[c].consumers == 1) {
      nodes_[c].fused_relu = true;
      nd.alias = c;
    }
  }
  weights_.assign(wsize, 0.f);
  grads_.assign(wsize, 0.f);
  state_.assign(ssize, 0.f);
}

void Net::init_weights(uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (Node& nd : nodes_) {
    const Dims in = nd.in[0] < 0 ? input_ : nodes_[nd.in[0]].out;
    if (nd.spec.kind == LayerKind::batch_norm) {
      std::fill(weights_.begin() + nd.w_off, weights_.begin() + nd.w_off + nd.w_count, 1.f);
      std::fill(weights_.begin() + nd.b_off, weights_.begin() + nd.b_off + nd.b_count, 0.f);
      std::fill(state_.begin() + nd.s_off, state_.begin() + nd.s_off + in.c, 0.f);
      std::fill(state_.begin() + nd.s_off + in.c, state_.begin() + nd.s_off + 2 * in.c, 1.f);
      continue;
    }
    if (!nd.w_count) continue;
    const double fan_in = double(nd.w_count) / (nd.spec.kind == LayerKind::conv ? nd.spec.filters : nd.spec.units);
    const float bound = float(1 / std::sqrt(fan_in));
    std::uniform_real_distribution<float> u(-bound, bound);
    if (cfg_.init == "kaiming") {
      std::normal_distribution<float> g(0.f, float(std::sqrt(2 / fan_in)));
      for (size_t i = 0; i < nd.w_count; ++i) weights_[nd.w_off + i] = g(rng);
      std::fill(weights_.begin() + nd.b_off, weights_.begin() + nd.b_off + nd.b_count, 0.f);
      continue;
    }
    for (size_t i = 0; i < nd.w_count; ++i) weights_[nd.w_off + i] = u(rng);
    for (size_t i = 0; i < nd.b_count; ++i) weights_[nd.b_off + i] = u(rng);
  }
}

void Net::reserve(int n) {
  if (n <= capacity_) return;
  capacity_ = n;
  size_t scratch = 0;
  for (Node& nd : nodes_) {
    const size_t count = size_t(n) * nd.out.size();
    nd.y.assign(nd.alias >= 0 ? 0 : count, 0.f);
    nd.dy.assign(nd.alias >= 0 ? 0 : count, 0.f);
    const Dims in = nd.in[0] < 0 ? input_ : nodes_[nd.in[0]].out;
    if (nd.spec.kind == LayerKind::dropout) nd.aux.assign(count, 0.f);
    if (nd.spec.kind == LayerKind::batch_norm) nd.aux.assign(2 * size_t(in.c), 0.f);
    if (nd.spec.kind == LayerKind::max_pool) nd.argmax.assign(count, 0);
    for (int i : nd.in)
      if (i < 0 || nodes_[i].consumers > 1) scratch = std::max(scratch, size_t(n) * in.size());
  }
  scratch_.assign(scratch, 0.f);
  probs_.assign(size_t(n) * classes_, 0.f);
  losses_.assign(n, 0.f);
}

const float* Net::input_of(const Node& nd, int k) const {
  const int i = nd.in[k];
  if (i < 0) return x_;
  const Node& src = nodes_[i];
  return src.alias >= 0 ? nodes_[src.alias].y.data() : src.y.data();
}

double Net::forward(int n, const float* x, const int32_t* labels, bool train, uint64_t key,
                    const uint64_t* sample_keys) {
  reserve(n);
  n_ = n;
  x_ = x;
  labels_ = labels;
  train_ = train;
  double loss = 0;
  Stopwatch clock;
  for (Node& nd : nodes_) {
    if (nd.alias >= 0) continue;  // computed by the conv it is fused into
    if (profiling_) clock.reset();
    const Dims in = nd.in[0] < 0 ? input_ : nodes_[nd.in[0]].out;
    const float* a = input_of(nd, 0);
    float* y = nd.y.data();
    const float* w = weights_.data() + nd.w_off;
    const float* b = nd.b_count ? weights_.data() + nd.b_off : nullptr;
    const size_t count = size_t(n) * nd.out.size();
    switch (nd.spec.kind) {
      case LayerKind::conv: {
        ConvShape s = conv_shape(nd, in, n);
        s.relu = nd.fused_relu;
        conv_forward(s, a, w, b, y);
        break;
      }
      case LayerKind::max_pool: max_pool_forward(pool_shape(nd, in, n), a, y, nd.argmax.data()); break;
      case LayerKind::avg_pool: avg_pool_forward(pool_shape(nd, in, n), a, y); break;
      case LayerKind::global_avg_pool: global_avg_pool_forward(n, in.c, in.h * in.w, a, y); break;
      case LayerKind::fc: fc_forward({n, int(in.size()), nd.spec.units}, a, w, b, y); break;
      case LayerKind::relu: relu_forward(count, a, y); break;
      case LayerKind::add: add_forward(count, a, input_of(nd, 1), y); break;
      case LayerKind::flatten: std::memcpy(y, a, count * sizeof(float)); break;
      case LayerKind::dropout:
        if (train && nd.spec.p > 0) {
          DropoutShape s{n, nd.out.size(), nd.spec.p};
          dropout_forward(s, key ^ (uint64_t(&nd - nodes_.data()) * 0x100000001B3ull), sample_keys, a, y, nd.aux.data());
        } else {
          std::memcpy(y, a, count * sizeof(float));
        }
        break;
      case LayerKind::batch_norm: {
        BnShape s{n, in.c, in.h * in.w, nd.spec.eps, nd.spec.momentum};
        float* run = state_.data() + nd.s_off;
        if (train)
          bn_forward_train(s, a, w, b, y, nd.aux.data(), nd.aux.data() + in.c, run, run + in.c);
        else
          bn_forward_eval(s, a, w, b, run, run + in.c, y);
        break;
      }
      case LayerKind::softmax_xent:
        loss = softmax_xent_forward(n, classes_, a, labels, probs_.data(), losses_.data());
        y[0] = float(loss);
        break;
    }
    if (profiling_) nd.t_fwd += clock.seconds();
  }
  return loss;
}

// Where the gradient for node `from`'s output goes: its own dy when this is its only consumer
// (written in place), else scratch that the caller then adds on.
float* Net::grad_target(int from, size_t, std::vector<float>& scratch) {
  if (from >= 0 && nodes_[from].consumers == 1) return grad(from);
  return scratch.data();
}

void Net::backward(bool want_input_grad) {
  const int n = n_;
  if (want_input_grad) input_grad_.assign(size_t(n) * input_.size(), 0.f);
  for (Node& nd : nodes_)
    for (int i : nd.in)
      if (i >= 0 && nodes_[i].consumers > 1)
        std::fill(grad(i), grad(i) + size_t(n) * nodes_[i].out.size(), 0.f);

  Stopwatch clock;
  for (int idx = int(nodes_.size()) - 1; idx >= 0; --idx) {
    Node& nd = nodes_[idx];
    if (nd.alias >= 0) continue;  // its gradient already lands in the conv's, which masks it
    if (profiling_) clock.reset();
    const Dims in = nd.in[0] < 0 ? input_ : nodes_[nd.in[0]].out;
    const size_t in_count = size_t(n) * in.size();
    const float* a = input_of(nd, 0);
    const float* dy = nd.dy.data();
    const float* w = weights_.data() + nd.w_off;
    float* dw = grads_.data() + nd.w_off;
    float* db = nd.b_count ? grads_.data() + nd.b_off : nullptr;
    const size_t count = size_t(n) * nd.out.size();

    for (size_t k = 0; k < nd.in.size(); ++k) {
      const int from = nd.in[k];
      const bool need_dx = from >= 0 || want_input_grad;
      // The first layer's input gradient is skipped for the ops that can skip it.
      float* dx = need_dx ? grad_target(from, in_count, scratch_) : nullptr;
      switch (nd.spec.kind) {
        case LayerKind::conv: {
          ConvShape s = conv_shape(nd, in, n);
          s.relu = nd.fused_relu;
          conv_backward(s, a, w, nd.y.data(), dy, dx, dw, db);
          break;
        }
        case LayerKind::fc: fc_backward({n, int(in.size()), nd.spec.units}, a, w, dy, dx, dw, db); break;
        case LayerKind::batch_norm: {
          BnShape s{n, in.c, in.h * in.w, nd.spec.eps, nd.spec.momentum};
          bn_backward(s, a, dy, w, nd.aux.data(), nd.aux.data() + in.c, dx, dw, db);
          break;
        }
        default:
          if (!dx) break;
          switch (nd.spec.kind) {
            case LayerKind::max_pool: max_pool_backward(pool_shape(nd, in, n), dy, nd.argmax.data(), dx); break;
            case LayerKind::avg_pool: avg_pool_backward(pool_shape(nd, in, n), dy, dx); break;
            case LayerKind::global_avg_pool: global_avg_pool_backward(n, in.c, in.h * in.w, dy, dx); break;
            case LayerKind::relu: relu_backward(count, nd.y.data(), dy, dx); break;
            case LayerKind::add:
            case LayerKind::flatten: std::memcpy(dx, dy, count * sizeof(float)); break;
            case LayerKind::dropout:
              if (train_ && nd.spec.p > 0)
                dropout_backward({n, nd.out.size(), nd.spec.p}, nd.aux.data(), dy, dx);
              else
                std::memcpy(dx, dy, count * sizeof(float));
              break;
            case LayerKind::softmax_xent:
              softmax_xent_backward(n, classes_, probs_.data(), labels_, 1.f / float(n), dx);
              break;
            default: break;
          }
      }
      if (!dx) continue;
      if (from < 0) {
        if (want_input_grad) accumulate(in_count, dx, input_grad_.data());
      } else if (nodes_[from].consumers > 1) {
        accumulate(in_count, dx, grad(from));
      }
    }
    if (profiling_) nd.t_bwd += clock.seconds();
  }
}

std::string Net::profile() const {
  std::ostringstream o;
  char line[160];
  double f = 0, b = 0;
  for (const Node& nd : nodes_) f += nd.t_fwd, b += nd.t_bwd;
  std::snprintf(line, sizeof line, "%-16s %-16s %10s %10s %7s\n", "layer", "type", "fwd s", "bwd s", "share");
  o << line;
  for (const Node& nd : nodes_) {
    std::snprintf(line, sizeof line, "%-16s %-16s %10.3f %10.3f %6.1f%%\n", nd.spec.name.c_str(), layer_kind_name(nd.spec.kind),
                  nd.t_fwd, nd.t_bwd, 100.0 * (nd.t_fwd + nd.t_bwd) / std::max(1e-9, f + b));
    o << line;
  }
  return o.str();
}

double Net::flops_per_image() const {
  double f = 0;
  for (const Node& nd : nodes_) f += nd.flops;
  return f;
}

std::string Net::summary() const {
  std::ostringstream o;
  char line[256];
  std::snprintf(line, sizeof line, "%-16s %-16s %-14s %-16s %12s %14s\n", "layer", "type", "output",
                "inputs", "params", "MFLOPs/img");
  o << line;
  std::snprintf(line, sizeof line, "%-16s %-16s %-14s %-16s %12s %14s\n", "data", "input",
                dims_text(input_).c_str(), "", "", "");
  o << line;
  size_t params = 0;
  for (const Node& nd : nodes_) {
    std::string ins;
    for (int i : nd.in) ins += (ins.empty() ? "" : ",") + (i < 0 ? std::string("data") : nodes_[i].spec.name);
    const size_t p = nd.w_count + nd.b_count;
    params += p;
    std::snprintf(line, sizeof line, "%-16s %-16s %-14s %-16s %12zu %14.3f\n", nd.spec.name.c_str(),
                  layer_kind_name(nd.spec.kind), dims_text(nd.out).c_str(), ins.c_str(), p, nd.flops / 1e6);
    o << line;
  }
  std::snprintf(line, sizeof line, "total: %zu parameters, %.3f MFLOPs per image (forward)\n", params,
                flops_per_image() / 1e6);
  o << line;
  return o.str();
}

}  // namespace convoy
