// GpuNet: net.cpp's forward and backward, node for node, with device buffers, each node run by its
// op's CUDA passes for either storage (fp32 NCHW, bf16 NHWC). Gradients reaching a node from
// several consumers are summed in its dy, as on the CPU.
#include "train/gpu_net.h"

#include <algorithm>

#include "train/bucket_plan.h"
#include "train/cuda/channels.cuh"
#include "train/layers/elementwise.h"

namespace convoy::gpu {
namespace {

// The plan's pack is the kernels' (OpFusion's rules ask for whole packs of bf16 channels).
static_assert(kPack<bf16> == kBf16ChannelPack);

// Sizes of the CPU net's flat parameter and state buffers, from its nodes' offsets.
size_t flat_param_count(const Net& net) {
  size_t n = 0;
  for (const Node& nd : net.built_nodes()) n = std::max(n, std::max(nd.w_off + nd.w_count, nd.b_off + nd.b_count));
  return n;
}

size_t flat_state_count(const Net& net) {
  size_t n = 0;
  for (const Node& nd : net.built_nodes()) n = std::max(n, nd.s_off + nd.s_count);
  return n;
}

// Whether node i's only consumer is the loss: its output is the logits.
bool feeds_only_loss(const Net& net, int i) {
  const auto& nodes = net.built_nodes();
  if (nodes[i].consumers != 1) return false;
  for (const Node& nd : nodes)
    for (int k : nd.in)
      if (k == i) return nd.op().is_loss();
  return false;
}

// cuDNN takes a tensor's dimensions as int and at most 2^31 - 1 values in all: a batch that makes
// any input or output larger cannot be described (cudnnSetTensor4dDescriptor: not supported).
void check_tensor_sizes(const Net& net, int max_batch) {
  constexpr long long kLimit = 2147483647;
  for (const Node& nd : net.built_nodes()) {
    size_t widest = nd.out.size();  // the net's input is the first layer's input
    for (const Dims& d : nd.in_dims) widest = std::max(widest, d.size());
    const long long values = (long long)max_batch * (long long)widest;
    if (values <= kLimit) continue;
    throw TensorTooLarge("a batch of " + std::to_string(max_batch) + " makes a tensor of layer " + nd.spec.name + " " +
                         std::to_string(values) + " values, more than the 2^31 - 1 a cuDNN tensor holds; use a " +
                         "smaller --batch (at most " + std::to_string(kLimit / (long long)widest) + ")");
  }
}

}  // namespace

// Every buffer is sized from the net as built, at its largest input (Net::built_nodes).
GpuNet::GpuNet(Context& ctx, const Net& net, int max_batch, Arena* arena, InputFold fold)
    : ctx_(ctx), net_(net), max_batch_(max_batch), nodes_(&net.built_nodes()) {
  check_tensor_sizes(net, max_batch);
  Arena& a = arena ? *arena : own_arena_;
  const bool half = ctx.bf16();
  const size_t params = flat_param_count(net);
  a.request(weights_, params);
  a.request(grads_, params);
  a.request(state_, std::max<size_t>(1, flat_state_count(net)));
  a.request(probs_, size_t(max_batch) * std::max(1, net.classes()));
  a.request(losses_, max_batch);
  const size_t nodes = net.built_nodes().size();
  buf_.resize(nodes);
  caches_.resize(nodes);
  input_ = built_input_ = choose_input_layout(net, half, fold);
  copy_at_.assign(nodes, 0);
  Sizes sizes;
  sizes.copy = params;                            // padded first-layer weights go after the flat ones
  plan_ = plan_fusions(net.built_nodes(), half);  // by channels and topology: the same at every size
  const size_t part = size_t(max_batch) * plan_.part_values * sizeof(bf16);
  for (size_t i = 0; i < nodes; ++i) set_up_node(a, int(i), sizes);
  if (half) {
    a.request(weights16_, std::max<size_t>(1, sizes.copy));
    a.request(dw16_, std::max<size_t>(1, sizes.dw16));
    a.request(dy16_, std::max<size_t>(1, sizes.dy16));
    a.request(segments_, std::max<size_t>(1, host_segments_.size()));
  }
  a.request(scratch_, std::max<size_t>(sizes.scratch, 1));
  if (part) a.request(part_, part);
  if (!arena) own_arena_.commit();
}

// bf16: pad the input's channels when only ops that take padded input read it (ungrouped
// convolutions), or fold it (its windows, or 2x2 pixel blocks, into the channels) when its one
// reader can take that (a stride-2 convolution); fp32 nets read the CPU's plain NCHW.
InputLayout GpuNet::choose_input_layout(const Net& net, bool half, InputFold fold) {
  const Dims id = net.built_input();
  const InputLayout plain = plain_input(id.c, id.h, id.w, id.c);
  if (!half || id.c >= 8) return plain;
  bool padded = true;
  int readers = 0;
  InputUse use;
  for (const Node& nd : net.built_nodes())
    for (int k : nd.in)
      if (k < 0) {
        ++readers, use = nd.op().input_use(nd);
        if (!use.padded) padded = false;
      }
  const bool foldable = padded && readers == 1 && id.c <= 4 && use.block_kernel >= 2;
  // At stride 1 every sample pixel is stored k^2 times: only where the window is small.
  const int window = use.block_kernel * use.block_kernel * id.c;
  if (foldable && fold == InputFold::patches && (use.block_stride == 2 || window <= 32))
    return patches_input(id.c, id.h, id.w, use.block_kernel, use.block_pad, use.block_stride);
  if (foldable && fold == InputFold::blocks && use.block_stride == 2)
    return space_to_depth_input(id.c, id.h, id.w, use.block_kernel, use.block_pad);
  if (padded && id.c > 1) return plain_input(id.c, id.h, id.w, 8);
  return plain;
}

// The node's output and its gradient (fp32 for every node of an fp32 net and for a bf16 net's
// logits), then what its op asks for, then the scratch its inputs' gradients may need.
void GpuNet::set_up_node(Arena& a, int i, Sizes& sizes) {
  const bool half = ctx_.bf16();
  const Node& nd = net_.built_nodes()[i];
  NodeBuffers& b = buf_[i];
  b.fp32 = !half || (nd.op().fp32_logits() && feeds_only_loss(net_, i));
  const size_t count = size_t(max_batch_) * nd.out.size(), elem = b.fp32 ? sizeof(float) : sizeof(bf16);
  if (!plan_.deferred[i]) a.request(b.y, count * elem);       // a deferred output is never stored
  if (plan_.grad_from[i] < 0) a.request(b.dy, count * elem);  // nor a gradient another node's dy holds
  // A ReLU run by its input (bf16, whole packs) leaves its signs as bits for the backward pass.
  if (plan_.relu_of[i] >= 0 && !plan_.deferred[i] && nd.out.c % kPack<bf16> == 0)
    a.request(b.relu_bits, count / kPack<bf16>);
  if (plan_.sums_taken[i])
    a.request(b.grad_sums, size_t(channels::parts((long long)max_batch_ * nd.out.h * nd.out.w)) * nd.out.c);
  copy_at_[i] = nd.w_off;
  GpuSetup s{a, nd, b, half, max_batch_, input_, copy_at_[i], sizes.copy, host_segments_, sizes.dw16, sizes.dy16};
  nd.op().gpu_setup(s);
  const size_t act = half ? sizeof(bf16) : sizeof(float);
  for (size_t k = 0; k < nd.in.size(); ++k)
    if (plan_.adds[i][k] && !nd.op().fusion(nd).adds_to_dx)
      sizes.scratch = std::max(sizes.scratch, size_t(max_batch_) * nd.in_dims[k].size() * act);
}

// The node shapes of each size are made once (Net::nodes_at) and kept, so that the GpuLayer of a
// pass, which refers to its node, and the plans the ops keep by shape stay valid. Work already
// queued keeps the shapes it was queued with (kernels take their arguments at launch, a graph at
// its capture).
void GpuNet::set_input(int h, int w) {
  if (h == input_.h && w == input_.w) return;
  const Dims built = net_.built_input();
  if (h == built.h && w == built.w) {
    nodes_ = &net_.built_nodes();
  } else {
    auto at = shaped_.find({h, w});
    if (at == shaped_.end()) at = shaped_.emplace(std::make_pair(h, w), net_.nodes_at({built.c, h, w})).first;
    nodes_ = &at->second;
  }
  input_ = resized_input(built_input_, h, w);
}

void GpuNet::set_profiling(bool on) {
  events_.reset(on ? new CudaEvent[4 * nodes_->size()] : nullptr);
  times_.assign(on ? nodes_->size() : 0, {0.0, 0.0});
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
  if (weights.size() != weights_.size() || state.size() > state_.size())
    fail("GpuNet: parameter layout differs from the net's");
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

GpuLayer GpuNet::layer(int i) {
  const Node& nd = (*nodes_)[i];
  const bool half = stores_bf16();
  GpuLayer l(ctx_, nd, i, batch_, buf_[i], half, input_, caches_[i]);
  for (size_t k = 0; k < nd.in.size(); ++k) {
    const int from = nd.in[k];
    if (from < 0) {
      l.x[k] = x_;
      continue;
    }
    l.x[k] = buf_[from].y.get();
    l.x_fp32[k] = buf_[from].fp32;
    l.x_grad[k] = buf_[from].dy.get();
    l.x_add[k] = plan_.adds[i][k];
    if (plan_.skip_grad[i][k]) l.x_grad[k] = nullptr;
    if (const int m = plan_.affine_in[i][k]; m >= 0) {
      const int src = (*nodes_)[m].in[0];
      l.affine[k] = {static_cast<const bf16*>(src < 0 ? x_ : buf_[src].y.get()), buf_[m].scale_shift.get(),
                     plan_.relu_of[m] >= 0};
      if (plan_.sums_taken[m]) {
        const float* stats = as<float>(buf_[m].aux);  // batch norm keeps its mean and 1 / std there
        l.grad_sums[k] = {l.affine[k].x, stats, stats + (*nodes_)[m].out.c, buf_[m].grad_sums.get()};
      }
    }
  }
  l.defer = plan_.deferred[i];
  l.dy_from = plan_.grad_from[i] >= 0 ? buf_[plan_.grad_from[i]].dy.get() : nullptr;
  l.sums_taken = plan_.sums_taken[i] ? buf_[i].grad_sums.get() : nullptr;
  // T is the activations' element type: float (NCHW, the fp32 master weights) or bf16 (NHWC, the
  // weight copy). Batch norm's parameters and every bias are read from the fp32 master weights.
  l.w = half ? static_cast<const void*>(weights16_.get() + copy_at_[i]) : weights_.get() + copy_at_[i];
  l.w32 = weights_.get() + nd.w_off;
  l.b = nd.b_count ? weights_.get() + nd.b_off : nullptr;
  l.dw = grads_.get() + nd.w_off;
  l.db = nd.b_count ? grads_.get() + nd.b_off : nullptr;
  l.state = state_.get() + nd.s_off;
  l.relu = plan_.relu_of[i] >= 0 ? &buf_[plan_.relu_of[i]] : nullptr;
  l.relu6 = plan_.relu_of[i] >= 0 && plan_.clipped[plan_.relu_of[i]];
  l.relu_bits = buf_[i].relu_bits.get();
  l.relu_dy2 = plan_.split_reader[i] ? part_.get() : nullptr;
  l.dw16 = dw16_.get();
  l.dy16 = dy16_.get();
  return l;
}

void GpuNet::forward(int n, const void* x, const int32_t* labels, bool train, const uint64_t* key,
                     const uint64_t* sample_keys) {
  if (n > max_batch_)
    fail("GpuNet: batch of " + std::to_string(n) + " exceeds the " + std::to_string(max_batch_) + " it was built for");
  batch_ = {n, train, labels, key, sample_keys, probs_.get(), losses_.get(), net_.classes()};
  batch_.label_smoothing = float(net_.config().train.label_smoothing);
  x_ = x;
  const auto& nodes = *nodes_;
  for (int i = 0; i < int(nodes.size()); ++i) {
    if (events_) record_event(events_[4 * i].get(), ctx_.stream());
    if (!plan_.fused[i]) nodes[i].op().gpu_forward(layer(i));  // a fused ReLU's input wrote its output
    if (events_) record_event(events_[4 * i + 1].get(), ctx_.stream());
  }
}

void GpuNet::backward(const std::function<void(size_t lo, size_t hi)>& ready) {
  const auto& nodes = *nodes_;
  for (int idx = int(nodes.size()) - 1; idx >= 0; --idx) {
    const Node& nd = nodes[idx];
    if (events_) record_event(events_[4 * idx + 2].get(), ctx_.stream());
    backward_node(idx);
    if (events_) record_event(events_[4 * idx + 3].get(), ctx_.stream());
    if (const FlatRange r = param_range(nd); ready && !r.empty()) ready(r.lo, r.hi);
  }
}

// Each input's gradient in turn, into the input's own dy: written by its first consumer, added to
// by the later ones (by the op itself where it can, else from scratch); the net's input needs none.
void GpuNet::backward_node(int idx) {
  const Node& nd = (*nodes_)[idx];
  if (plan_.fused[idx]) return;  // its input's backward pass takes its gradient
  GpuLayer l = layer(idx);
  if (nd.op().gpu_backward_all(l)) return;
  for (size_t k = 0; k < nd.in.size(); ++k) {
    const int from = nd.in[k];
    const bool add = plan_.adds[idx][k], in_pass = add && nd.op().fusion(nd).adds_to_dx;
    l.dx = from < 0 ? nullptr : add && !in_pass ? scratch_.get() : (plan_.split[idx][k] ? part_ : buf_[from].dy).get();
    l.dx_add = in_pass;
    nd.op().gpu_backward(l, int(k));
    if (!l.dx || !add || in_pass) continue;
    const size_t in_count = size_t(batch_.n) * nd.in_dims[k].size();
    if (stores_bf16())
      accumulate(ctx_, in_count, static_cast<const bf16*>(l.dx), as<bf16>(buf_[from].dy));
    else
      accumulate(ctx_, in_count, static_cast<const float*>(l.dx), as<float>(buf_[from].dy));
  }
}

}  // namespace convoy::gpu
