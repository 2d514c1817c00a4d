// GpuNet: net.cpp's forward and backward, node for node, with device buffers and the CUDA ops.
// Gradients reaching a node from several consumers are summed in its dy, as on the CPU.
#include "train/gpu_net.h"

#include <algorithm>

namespace convoy::gpu {
namespace {

// Sizes of the CPU net's flat parameter and state buffers, from its nodes' offsets.
size_t flat_param_count(const Net& net) {
  size_t n = 0;
  for (const Node& nd : net.nodes()) n = std::max(n, std::max(nd.w_off + nd.w_count, nd.b_off + nd.b_count));
  return n;
}

size_t flat_state_count(const Net& net) {
  size_t n = 0;
  for (const Node& nd : net.nodes()) n = std::max(n, nd.s_off + nd.s_count);
  return n;
}

void copy(Context& ctx, float* dst, const float* src, size_t count) {
  CONVOY_CUDA_CHECK(cudaMemcpyAsync(dst, src, count * sizeof(float), cudaMemcpyDeviceToDevice, ctx.stream()));
}

}  // namespace

GpuNet::GpuNet(Context& ctx, const Net& net, int max_batch, Arena* arena)
    : ctx_(ctx), net_(net), max_batch_(max_batch) {
  Arena& a = arena ? *arena : own_arena_;
  a.request(weights_, flat_param_count(net));
  a.request(grads_, flat_param_count(net));
  a.request(state_, std::max<size_t>(1, flat_state_count(net)));
  a.request(probs_, size_t(max_batch) * std::max(1, net.classes()));
  a.request(losses_, max_batch);
  const auto& nodes = net.nodes();
  size_t scratch = 0;
  buf_.resize(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& nd = nodes[i];
    const size_t count = size_t(max_batch) * nd.out.size();
    const Dims in = nd.in[0] < 0 ? net.input_dims() : nodes[nd.in[0]].out;
    a.request(buf_[i].y, count);
    a.request(buf_[i].dy, count);
    if (nd.spec.kind == LayerKind::dropout) a.request(buf_[i].aux, count);
    if (nd.spec.kind == LayerKind::batch_norm) a.request(buf_[i].aux, 2 * size_t(in.c));
    if (nd.spec.kind == LayerKind::max_pool) a.request(buf_[i].argmax, count);
    for (int k : nd.in)
      if (k < 0 || nodes[k].consumers > 1) scratch = std::max(scratch, size_t(max_batch) * in.size());
  }
  a.request(scratch_, std::max<size_t>(scratch, 1));
  if (!arena) own_arena_.commit();
}

void GpuNet::set_profiling(bool on) {
  events_.reset(on ? new CudaEvent[4 * net_.nodes().size()] : nullptr);
  times_.assign(on ? net_.nodes().size() : 0, {0.0, 0.0});
}

void GpuNet::collect_profile() {
  for (size_t i = 0; i < times_.size(); ++i) {
    times_[i].first += elapsed_seconds(events_[4 * i].get(), events_[4 * i + 1].get());
    times_[i].second += elapsed_seconds(events_[4 * i + 2].get(), events_[4 * i + 3].get());
  }
}

void GpuNet::move_profile_to(Net& into) {
  for (size_t i = 0; i < times_.size(); ++i) {
    into.add_profile(i, times_[i].first, times_[i].second);
    times_[i] = {0.0, 0.0};
  }
}

void GpuNet::upload(const std::vector<float>& weights, const std::vector<float>& state) {
  if (weights.size() != weights_.size() || state.size() > state_.size()) fail("GpuNet: parameter layout differs from the net's");
  weights_.upload(weights.data(), weights.size());
  CONVOY_CUDA_CHECK(cudaMemset(grads_.get(), 0, grads_.size() * sizeof(float)));
  if (!state.empty()) state_.upload(state.data(), state.size());
}

void GpuNet::download(std::vector<float>& weights, std::vector<float>& state) const {
  ctx_.synchronize();
  weights.resize(weights_.size());
  weights_.download(weights.data(), weights.size());
  state.resize(flat_state_count(net_));
  if (!state.empty()) state_.download(state.data(), state.size());
}

const ConvPlan& GpuNet::plan(int node, int n) {
  auto key = std::make_pair(node, n);
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;
  const Node& nd = net_.nodes()[node];
  const Dims in = nd.in[0] < 0 ? net_.input_dims() : net_.nodes()[nd.in[0]].out;
  auto p = std::make_unique<ConvPlan>(ctx_, conv_shape(nd, in, n), nd.in[0] >= 0);
  return *plans_.emplace(key, std::move(p)).first->second;
}

const float* GpuNet::input_of(int node, int k) const {
  const int from = net_.nodes()[node].in[k];
  return from < 0 ? x_ : buf_[from].y.get();
}

void GpuNet::forward(int n, const float* x, const int32_t* labels, bool train, const uint64_t* key,
                     const uint64_t* sample_keys) {
  if (n > max_batch_) fail("GpuNet: batch of " + std::to_string(n) + " exceeds the " + std::to_string(max_batch_) + " it was built for");
  n_ = n;
  x_ = x;
  labels_ = labels;
  train_ = train;
  const auto& nodes = net_.nodes();
  for (int i = 0; i < int(nodes.size()); ++i) {
    const Node& nd = nodes[i];
    const Dims in = nd.in[0] < 0 ? net_.input_dims() : nodes[nd.in[0]].out;
    const float* a = input_of(i, 0);
    float* y = buf_[i].y.get();
    const float* w = weights_.get() + nd.w_off;
    const float* b = nd.b_count ? weights_.get() + nd.b_off : nullptr;
    const size_t count = size_t(n) * nd.out.size();
    if (events_) record_event(events_[4 * i].get(), ctx_.stream());
    switch (nd.spec.kind) {
      case LayerKind::conv: conv_forward(ctx_, plan(i, n), a, w, b, y); break;
      case LayerKind::max_pool: max_pool_forward(ctx_, pool_shape(nd, in, n), a, y, buf_[i].argmax.get()); break;
      case LayerKind::avg_pool: avg_pool_forward(ctx_, pool_shape(nd, in, n), a, y); break;
      case LayerKind::global_avg_pool: global_avg_pool_forward(ctx_, n, in.c, in.h * in.w, a, y); break;
      case LayerKind::fc: fc_forward(ctx_, {n, int(in.size()), nd.spec.units}, a, w, b, y); break;
      case LayerKind::relu: relu_forward(ctx_, count, a, y); break;
      case LayerKind::add: add_forward(ctx_, count, a, input_of(i, 1), y); break;
      case LayerKind::flatten: copy(ctx_, y, a, count); break;
      case LayerKind::dropout:
        if (train && nd.spec.p > 0) {
          DropoutShape s{n, nd.out.size(), nd.spec.p};
          // The same per-layer key as the CPU net, so both drop the same elements.
          dropout_forward(ctx_, s, key, uint64_t(i) * 0x100000001B3ull, sample_keys, a, y, buf_[i].aux.get());
        } else {
          copy(ctx_, y, a, count);
        }
        break;
      case LayerKind::batch_norm: {
        BnShape s{n, in.c, in.h * in.w, nd.spec.eps, nd.spec.momentum};
        float* run = state_.get() + nd.s_off;
        float* aux = buf_[i].aux.get();
        if (train)
          bn_forward_train(ctx_, s, a, w, b, y, aux, aux + in.c, run, run + in.c);
        else
          bn_forward_eval(ctx_, s, a, w, b, run, run + in.c, y);
        break;
      }
      case LayerKind::softmax_xent:
        softmax_xent_forward(ctx_, n, net_.classes(), a, labels, probs_.get(), losses_.get());
        break;
    }
    if (events_) record_event(events_[4 * i + 1].get(), ctx_.stream());
  }
}

void GpuNet::backward(const std::function<void(size_t lo, size_t hi)>& ready) {
  const int n = n_;
  const auto& nodes = net_.nodes();
  for (const Node& nd : nodes)
    for (int i : nd.in)
      if (i >= 0 && nodes[i].consumers > 1)
        CONVOY_CUDA_CHECK(cudaMemsetAsync(buf_[i].dy.get(), 0, size_t(n) * nodes[i].out.size() * sizeof(float), ctx_.stream()));

  for (int idx = int(nodes.size()) - 1; idx >= 0; --idx) {
    const Node& nd = nodes[idx];
    const Dims in = nd.in[0] < 0 ? net_.input_dims() : nodes[nd.in[0]].out;
    const size_t in_count = size_t(n) * in.size();
    const float* a = input_of(idx, 0);
    const float* dy = buf_[idx].dy.get();
    const float* w = weights_.get() + nd.w_off;
    float* dw = grads_.get() + nd.w_off;
    float* db = nd.b_count ? grads_.get() + nd.b_off : nullptr;
    const size_t count = size_t(n) * nd.out.size();
    if (events_) record_event(events_[4 * idx + 2].get(), ctx_.stream());
    for (size_t k = 0; k < nd.in.size(); ++k) {
      const int from = nd.in[k];
      // The net's input needs no gradient; a node with one consumer takes it in place.
      float* dx = from < 0 ? nullptr : nodes[from].consumers == 1 ? buf_[from].dy.get() : scratch_.get();
      switch (nd.spec.kind) {
        case LayerKind::conv: conv_backward(ctx_, plan(idx, n), a, w, dy, dx, dw, db); break;
        case LayerKind::fc: fc_backward(ctx_, {n, int(in.size()), nd.spec.units}, a, w, dy, dx, dw, db); break;
        case LayerKind::batch_norm: {
          BnShape s{n, in.c, in.h * in.w, nd.spec.eps, nd.spec.momentum};
          const float* aux = buf_[idx].aux.get();
          bn_backward(ctx_, s, a, dy, w, aux, aux + in.c, dx, dw, db);
          break;
        }
        default:
          if (!dx) break;
          switch (nd.spec.kind) {
            case LayerKind::max_pool: max_pool_backward(ctx_, pool_shape(nd, in, n), dy, buf_[idx].argmax.get(), dx); break;
            case LayerKind::avg_pool: avg_pool_backward(ctx_, pool_shape(nd, in, n), dy, dx); break;
            case LayerKind::global_avg_pool: global_avg_pool_backward(ctx_, n, in.c, in.h * in.w, dy, dx); break;
            case LayerKind::relu: relu_backward(ctx_, count, buf_[idx].y.get(), dy, dx); break;
            case LayerKind::add:
            case LayerKind::flatten: copy(ctx_, dx, dy, count); break;
            case LayerKind::dropout:
              if (train_ && nd.spec.p > 0)
                dropout_backward(ctx_, {n, nd.out.size(), nd.spec.p}, buf_[idx].aux.get(), dy, dx);
              else
                copy(ctx_, dx, dy, count);
              break;
            case LayerKind::softmax_xent:
              softmax_xent_backward(ctx_, n, net_.classes(), probs_.get(), labels_, 1.f / float(n), dx);
              break;
            default: break;
          }
      }
      if (dx && from >= 0 && nodes[from].consumers > 1) accumulate(ctx_, in_count, dx, buf_[from].dy.get());
    }
    if (events_) record_event(events_[4 * idx + 3].get(), ctx_.stream());
    if (ready && (nd.w_count || nd.b_count)) {
      const size_t lo = std::min(nd.w_count ? nd.w_off : nd.b_off, nd.b_count ? nd.b_off : nd.w_off);
      const size_t hi = std::max(nd.w_off + nd.w_count, nd.b_off + nd.b_count);
      ready(lo, hi);
    }
  }
}

}  // namespace convoy::gpu
