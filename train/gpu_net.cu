// GpuNet: net.cpp's forward and backward, node for node, with device buffers and the CUDA ops; one
// body for both storages (fp32 NCHW, bf16 NHWC), instantiated per element type. Gradients reaching
// a node from several consumers are summed in its dy, as on the CPU.
#include "train/gpu_net.h"

#include <algorithm>
#include <type_traits>

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

// Whether node i's only consumer is the loss: its output is the logits, kept in fp32.
bool feeds_only_loss(const Net& net, int i) {
  const auto& nodes = net.nodes();
  if (nodes[i].consumers != 1) return false;
  for (const Node& nd : nodes)
    for (int k : nd.in)
      if (k == i) return nd.spec.kind == LayerKind::softmax_xent;
  return false;
}

void copy(Context& ctx, void* dst, const void* src, size_t bytes) {
  CONVOY_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ctx.stream()));
}

template <typename T>
T* as(const DeviceBuffer<unsigned char>& b) {
  return reinterpret_cast<T*>(b.get());
}

}  // namespace

GpuNet::GpuNet(Context& ctx, const Net& net, int max_batch, Arena* arena, bool space_to_depth)
    : ctx_(ctx), net_(net), max_batch_(max_batch) {
  Arena& a = arena ? *arena : own_arena_;
  const bool half = ctx.bf16();
  const size_t act = half ? sizeof(bf16) : sizeof(float);
  const size_t params = flat_param_count(net);
  a.request(weights_, params);
  a.request(grads_, params);
  a.request(state_, std::max<size_t>(1, flat_state_count(net)));
  a.request(probs_, size_t(max_batch) * std::max(1, net.classes()));
  a.request(losses_, max_batch);
  const auto& nodes = net.nodes();
  size_t scratch = 0, dw16 = 0, dy16 = 0;
  buf_.resize(nodes.size());
  // bf16: pad the input's channels when only ungrouped convolutions read it, or fold 2x2 pixel
  // blocks into its channels when one stride-2 convolution reads it.
  const Dims id = net.input_dims();
  input_ = plain_input(id.c, id.h, id.w, id.c);
  if (half && id.c < 8) {
    bool only_convs = true;
    int readers = 0;
    const Node* reader = nullptr;
    for (const Node& nd : nodes)
      for (int k : nd.in)
        if (k < 0) {
          ++readers, reader = &nd;
          if (nd.spec.kind != LayerKind::conv || nd.spec.groups != 1) only_convs = false;
        }
    if (only_convs && readers == 1 && space_to_depth && id.c <= 4 && reader->spec.stride == 2 &&
        reader->spec.kernel >= 2)
      input_ = space_to_depth_input(id.c, id.h, id.w, reader->spec.kernel, reader->spec.pad);
    else if (only_convs && id.c > 1)
      input_ = plain_input(id.c, id.h, id.w, 8);
  }
  copy_at_.assign(nodes.size(), 0);
  size_t copy_size = params;  // padded first-layer weights go after the flat ones
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& nd = nodes[i];
    NodeBuffers& b = buf_[i];
    const size_t count = size_t(max_batch) * nd.out.size();
    const Dims in = nd.in[0] < 0 ? net.input_dims() : nodes[nd.in[0]].out;
    b.fp32 = !half || (nd.spec.kind == LayerKind::fc && feeds_only_loss(net, int(i)));
    const size_t elem = b.fp32 ? sizeof(float) : sizeof(bf16);
    a.request(b.y, count * elem);
    a.request(b.dy, count * elem);
    if (nd.spec.kind == LayerKind::dropout) a.request(b.aux, count * elem);
    if (nd.spec.kind == LayerKind::batch_norm) a.request(b.aux, 2 * size_t(in.c) * sizeof(float));
    if (nd.spec.kind == LayerKind::max_pool) a.request(b.argmax, count);
    if (half && nd.spec.kind == LayerKind::fc && in.h * in.w > 1 && in.c > 1) {
      b.reorder = true;
      a.request(b.aux, size_t(max_batch) * in.size() * sizeof(bf16));
      a.request(b.aux2, size_t(max_batch) * in.size() * sizeof(bf16));
    }
    copy_at_[i] = nd.w_off;
    if (half && nd.spec.kind == LayerKind::conv) {
      const int c = in.c / nd.spec.groups, rs = nd.spec.kernel * nd.spec.kernel;
      if (nd.w_count >= (size_t(1) << 32)) fail("GpuNet: a convolution with 2^32 weights or more");
      if (nd.in[0] < 0 && (input_.c_stored != in.c || input_.block != 1)) {
        const int kb = (nd.spec.kernel + 1) / 2, taps = input_.block == 2 ? kb * kb : rs;
        const size_t padded = size_t(nd.spec.filters) * taps * size_t(input_.c_stored);
        host_segments_.push_back({nd.w_off, nd.w_off + nd.w_count, c, rs, copy_size, input_.c_stored,
                                  input_.block == 2 ? nd.spec.kernel : 0});
        copy_at_[i] = copy_size;
        copy_size += padded;
        dw16 = std::max(dw16, padded);
      } else {
        if (c > 1 && rs > 1) host_segments_.push_back({nd.w_off, nd.w_off + nd.w_count, c, rs, nd.w_off, c});
        dw16 = std::max(dw16, nd.w_count);
      }
    }
    if (half && b.fp32) dy16 = std::max(dy16, count);
    for (int k : nd.in)
      if (k < 0 || nodes[k].consumers > 1) scratch = std::max(scratch, size_t(max_batch) * in.size() * act);
  }
  relu_of_.assign(nodes.size(), -1);
  fused_.assign(nodes.size(), false);
  if (half)
    for (size_t j = 0; j < nodes.size(); ++j) {
      const int i = nodes[j].in[0];
      if (nodes[j].spec.kind != LayerKind::relu || i < 0 || nodes[i].consumers != 1) continue;
      if (nodes[i].spec.kind != LayerKind::batch_norm && nodes[i].spec.kind != LayerKind::add) continue;
      relu_of_[i] = int(j);
      fused_[j] = true;
    }
  if (half) {
    a.request(weights16_, std::max<size_t>(1, copy_size));
    a.request(dw16_, std::max<size_t>(1, dw16));
    a.request(dy16_, std::max<size_t>(1, dy16));
    a.request(segments_, std::max<size_t>(1, host_segments_.size()));
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
  if (stores_bf16()) {
    if (!host_segments_.empty()) segments_.upload(host_segments_.data(), host_segments_.size());
    copy_ = {weights16_.get(), segments_.get(), int(host_segments_.size())};
    // A padded convolution's extra weights are never written: they stay zero.
    CONVOY_CUDA_CHECK(cudaMemset(weights16_.get(), 0, weights16_.size() * sizeof(bf16)));
    // The copies above ran on the legacy stream, which the context's stream does not wait for.
    CONVOY_CUDA_CHECK(cudaDeviceSynchronize());
    refresh_weight_copy();
  }
}

void GpuNet::refresh_weight_copy() { gpu::refresh_weight_copy(ctx_, weights_.size(), weights_.get(), copy_); }

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
  const bool first = nd.in[0] < 0;
  auto p = std::make_unique<ConvPlan>(ctx_, conv_shape(nd, in, n), !first, first ? input_.c_stored : 0,
                                      first && input_.block == 2);
  return *plans_.emplace(key, std::move(p)).first->second;
}

template <typename T>
const T* GpuNet::input_of(int node, int k) const {
  const int from = net_.nodes()[node].in[k];
  return from < 0 ? static_cast<const T*>(x_) : as<const T>(buf_[from].y);
}

void GpuNet::forward(int n, const void* x, const int32_t* labels, bool train, const uint64_t* key,
                     const uint64_t* sample_keys) {
  if (n > max_batch_) fail("GpuNet: batch of " + std::to_string(n) + " exceeds the " + std::to_string(max_batch_) + " it was built for");
  n_ = n;
  x_ = x;
  labels_ = labels;
  train_ = train;
  key_ = key;
  sample_keys_ = sample_keys;
  if (stores_bf16())
    forward_as<bf16>();
  else
    forward_as<float>();
}

void GpuNet::backward(const std::function<void(size_t lo, size_t hi)>& ready) {
  if (stores_bf16())
    backward_as<bf16>(ready);
  else
    backward_as<float>(ready);
}

namespace {
// The weights the ops of element type T multiply with: the fp32 masters or their bf16 copy.
template <typename T>
const T* weights_as(const DeviceBuffer<float>& masters, const DeviceBuffer<bf16>& copy) {
  if constexpr (std::is_same_v<T, bf16>)
    return copy.get();
  else
    return masters.get();
}
}  // namespace

// T is the activations' element type: float (NCHW, the fp32 master weights) or bf16 (NHWC, the
// weight copy). Batch norm's parameters and every bias are read from the fp32 master weights.
template <typename T>
void GpuNet::forward_as() {
  constexpr bool half = std::is_same_v<T, bf16>;
  constexpr Layout layout = half ? Layout::nhwc : Layout::nchw;
  const T* weights = weights_as<T>(weights_, weights16_);
  const int n = n_;
  const auto& nodes = net_.nodes();
  for (int i = 0; i < int(nodes.size()); ++i) {
    const Node& nd = nodes[i];
    NodeBuffers& bf = buf_[i];
    const Dims in = nd.in[0] < 0 ? net_.input_dims() : nodes[nd.in[0]].out;
    const int hw = in.h * in.w;
    const T* a = input_of<T>(i, 0);
    T* y = as<T>(bf.y);
    const T* w = weights + copy_at_[i];
    const float* w32 = weights_.get() + nd.w_off;
    const float* b = nd.b_count ? weights_.get() + nd.b_off : nullptr;
    const size_t count = size_t(n) * nd.out.size();
    if (events_) record_event(events_[4 * i].get(), ctx_.stream());
    switch (nd.spec.kind) {
      case LayerKind::conv: conv_forward(ctx_, plan(i, n), a, w, b, y); break;
      case LayerKind::max_pool: max_pool_forward(ctx_, pool_shape(nd, in, n), a, y, bf.argmax.get(), layout); break;
      case LayerKind::avg_pool: avg_pool_forward(ctx_, pool_shape(nd, in, n), a, y, layout); break;
      case LayerKind::global_avg_pool: global_avg_pool_forward(ctx_, n, in.c, hw, a, y, layout); break;
      case LayerKind::fc: {
        const FcShape s{n, int(in.size()), nd.spec.units};
        const T* x = a;
        if (bf.reorder) {  // the weights expect the CPU's NCHW flatten order
          nhwc_to_nchw(ctx_, n, in.c, hw, a, as<T>(bf.aux));
          x = as<T>(bf.aux);
        }
        if (bf.fp32)
          fc_forward(ctx_, s, x, w, b, as<float>(bf.y));
        else
          fc_forward(ctx_, s, x, w, b, y);
        break;
      }
      case LayerKind::relu:
        if (!fused_[i]) relu_forward(ctx_, count, a, y);  // else its input's pass wrote y
        break;
      case LayerKind::add:
        if (relu_of_[i] >= 0)
          add_relu_forward(ctx_, count, a, input_of<T>(i, 1), as<T>(buf_[relu_of_[i]].y));
        else
          add_forward(ctx_, count, a, input_of<T>(i, 1), y);
        break;
      case LayerKind::flatten:
        if (half && hw > 1 && in.c > 1)
          nhwc_to_nchw(ctx_, n, in.c, hw, a, y);
        else
          copy(ctx_, y, a, count * sizeof(T));
        break;
      case LayerKind::dropout:
        if (train_ && nd.spec.p > 0) {
          DropoutShape s{n, nd.out.size(), nd.spec.p};
          // The same per-layer key as the CPU net, so both drop the same elements.
          dropout_forward(ctx_, s, key_, uint64_t(i) * 0x100000001B3ull, sample_keys_, a, y, as<T>(bf.aux));
        } else {
          copy(ctx_, y, a, count * sizeof(T));
        }
        break;
      case LayerKind::batch_norm: {
        BnShape s{n, in.c, hw, nd.spec.eps, nd.spec.momentum};
        float* run = state_.get() + nd.s_off;
        float* aux = as<float>(bf.aux);
        if constexpr (half) {
          const int r = relu_of_[i];
          T* out = r >= 0 ? as<T>(buf_[r].y) : y;
          if (train_)
            bn_forward_train(ctx_, s, a, w32, b, out, aux, aux + in.c, run, run + in.c, r >= 0);
          else
            bn_forward_eval(ctx_, s, a, w32, b, run, run + in.c, out, r >= 0);
        } else if (train_) {
          bn_forward_train(ctx_, s, a, w32, b, y, aux, aux + in.c, run, run + in.c);
        } else {
          bn_forward_eval(ctx_, s, a, w32, b, run, run + in.c, y);
        }
        break;
      }
      case LayerKind::softmax_xent:
        if (nd.in[0] >= 0 && buf_[nd.in[0]].fp32)
          softmax_xent_forward(ctx_, n, net_.classes(), input_of<float>(i, 0), labels_, probs_.get(), losses_.get());
        else
          softmax_xent_forward(ctx_, n, net_.classes(), a, labels_, probs_.get(), losses_.get());
        break;
    }
    if (events_) record_event(events_[4 * i + 1].get(), ctx_.stream());
  }
}

template <typename T>
void GpuNet::backward_as(const std::function<void(size_t lo, size_t hi)>& ready) {
  constexpr bool half = std::is_same_v<T, bf16>;
  constexpr Layout layout = half ? Layout::nhwc : Layout::nchw;
  const T* weights = weights_as<T>(weights_, weights16_);
  const int n = n_;
  const auto& nodes = net_.nodes();
  for (const Node& nd : nodes)
    for (int i : nd.in)
      if (i >= 0 && nodes[i].consumers > 1)
        CONVOY_CUDA_CHECK(cudaMemsetAsync(buf_[i].dy.get(), 0, size_t(n) * nodes[i].out.size() * sizeof(T), ctx_.stream()));

  for (int idx = int(nodes.size()) - 1; idx >= 0; --idx) {
    const Node& nd = nodes[idx];
    NodeBuffers& bf = buf_[idx];
    const Dims in = nd.in[0] < 0 ? net_.input_dims() : nodes[nd.in[0]].out;
    const int hw = in.h * in.w;
    const size_t in_count = size_t(n) * in.size();
    const T* a = input_of<T>(idx, 0);
    const T* dy = as<T>(bf.dy);
    const T* w = weights + copy_at_[idx];
    const float* w32 = weights_.get() + nd.w_off;
    float* dw = grads_.get() + nd.w_off;
    float* db = nd.b_count ? grads_.get() + nd.b_off : nullptr;
    const size_t count = size_t(n) * nd.out.size();
    if (events_) record_event(events_[4 * idx + 2].get(), ctx_.stream());
    if (half && nd.spec.kind == LayerKind::add && relu_of_[idx] >= 0) {
      // The ReLU's input gradient straight into both inputs' gradients (added where they have
      // other consumers too), instead of a ReLU pass and two copies.
      const NodeBuffers& r = buf_[relu_of_[idx]];
      T* d[2] = {nullptr, nullptr};
      bool acc[2] = {false, false};
      for (int k = 0; k < 2; ++k)
        if (nd.in[k] >= 0) d[k] = as<T>(buf_[nd.in[k]].dy), acc[k] = nodes[nd.in[k]].consumers > 1;
      add_relu_backward(ctx_, count, as<T>(r.y), as<T>(r.dy), d[0], acc[0], d[1], acc[1]);
      if (events_) record_event(events_[4 * idx + 3].get(), ctx_.stream());
      continue;
    }
    if (fused_[idx]) {  // its input's backward pass takes its gradient
      if (events_) record_event(events_[4 * idx + 3].get(), ctx_.stream());
      continue;
    }
    for (size_t k = 0; k < nd.in.size(); ++k) {
      const int from = nd.in[k];
      // The net's input needs no gradient; a node with one consumer takes it in place.
      void* to = from < 0 ? nullptr : nodes[from].consumers == 1 ? buf_[from].dy.get() : scratch_.get();
      T* dx = static_cast<T*>(to);
      switch (nd.spec.kind) {
        case LayerKind::conv:
          if constexpr (half)
            conv_backward(ctx_, plan(idx, n), a, w, dy, dx, dw, db, dw16_.get());
          else
            conv_backward(ctx_, plan(idx, n), a, w, dy, dx, dw, db);
          break;
        case LayerKind::fc: {
          const FcShape s{n, int(in.size()), nd.spec.units};
          if constexpr (half) {
            const bf16* x = bf.reorder ? as<bf16>(bf.aux) : a;
            bf16* fdx = bf.reorder && dx ? as<bf16>(bf.aux2) : dx;
            if (bf.fp32)
              fc_backward(ctx_, s, x, w, as<float>(bf.dy), fdx, dw, db, dy16_.get());
            else
              fc_backward(ctx_, s, x, w, dy, fdx, dw, db, dy16_.get());
            if (fdx != dx) nchw_to_nhwc(ctx_, n, in.c, hw, fdx, dx);
          } else {
            fc_backward(ctx_, s, a, w, dy, dx, dw, db);
          }
          break;
        }
        case LayerKind::batch_norm: {
          BnShape s{n, in.c, hw, nd.spec.eps, nd.spec.momentum};
          const float* aux = as<float>(bf.aux);
          if constexpr (half) {
            const int r = relu_of_[idx];
            if (r >= 0)
              bn_backward(ctx_, s, a, as<T>(buf_[r].dy), w32, aux, aux + in.c, dx, dw, db, as<T>(buf_[r].y));
            else
              bn_backward(ctx_, s, a, dy, w32, aux, aux + in.c, dx, dw, db);
          } else {
            bn_backward(ctx_, s, a, dy, w32, aux, aux + in.c, dx, dw, db);
          }
          break;
        }
        default:
          if (!dx) break;
          switch (nd.spec.kind) {
            case LayerKind::max_pool:
              max_pool_backward(ctx_, pool_shape(nd, in, n), dy, bf.argmax.get(), dx, layout);
              break;
            case LayerKind::avg_pool: avg_pool_backward(ctx_, pool_shape(nd, in, n), dy, dx, layout); break;
            case LayerKind::global_avg_pool: global_avg_pool_backward(ctx_, n, in.c, hw, dy, dx, layout); break;
            case LayerKind::relu: relu_backward(ctx_, count, as<T>(bf.y), dy, dx); break;
            case LayerKind::add: copy(ctx_, dx, dy, count * sizeof(T)); break;
            case LayerKind::flatten:
              if (half && hw > 1 && in.c > 1)
                nchw_to_nhwc(ctx_, n, in.c, hw, dy, dx);
              else
                copy(ctx_, dx, dy, count * sizeof(T));
              break;
            case LayerKind::dropout:
              if (train_ && nd.spec.p > 0)
                dropout_backward(ctx_, {n, nd.out.size(), nd.spec.p}, as<T>(bf.aux), dy, dx);
              else
                copy(ctx_, dx, dy, count * sizeof(T));
              break;
            case LayerKind::softmax_xent:
              if (buf_[from].fp32)
                softmax_xent_backward(ctx_, n, net_.classes(), probs_.get(), labels_, 1.f / float(n),
                                      static_cast<float*>(to));
              else
                softmax_xent_backward(ctx_, n, net_.classes(), probs_.get(), labels_, 1.f / float(n), dx);
              break;
            default: break;
          }
      }
      if (dx && from >= 0 && nodes[from].consumers > 1) accumulate(ctx_, in_count, static_cast<const T*>(dx), as<T>(buf_[from].dy));
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
