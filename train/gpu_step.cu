// GpuStep: the CUDA backend's training step. Every buffer is made in the constructor. A step's
// batch (each micro-batch, with accumulation) lands in one of two slots, so the copy of the next
// overlaps the compute of this one.
#include "train/gpu_step.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "train/cuda/batch_metrics.h"
#include "train/cuda/step_scalars.h"
#include "train/data_parallel.h"
#include "train/optimizer_update.h"
#include "train/step.h"

namespace convoy::gpu {
namespace {

size_t align_up(size_t n) { return (n + 255) & ~size_t(255); }

// What refuses, in one line, a step whose arena is larger than the device memory free now ("": it
// fits). The context's workspaces are already allocated: they count as asked and as free.
std::string no_room(const Context& ctx, const std::string& name, int batch, size_t arena, size_t input,
                    size_t optimiser) {
  size_t free = 0, total = 0;
  CONVOY_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  if (arena <= free) return "";
  const size_t ws = ctx.workspaces_bytes();
  return name + ": the step needs " + mib_text(arena + ws) + " for a batch of " + std::to_string(batch) +
         " (the net's weights, activations and gradients " + mib_text(arena - input - optimiser) + ", input batches " +
         mib_text(input) + ", optimiser state " + mib_text(optimiser) + ", cuDNN and cuBLAS workspaces " +
         mib_text(ws) + "), " + mib_text(free + ws) + " are free; use a smaller --batch or a larger [train] accumulate";
}

// Throws OutOfMemory when the step does not fit on this rank or, with several, on any rank: they
// agree before NCCL starts, so that none is left waiting in its set-up for a rank that stopped (a
// batch-size sweep goes on from there on every rank).
void check_fits(const Context& ctx, const std::string& name, int batch, size_t arena, size_t input, size_t optimiser,
                int ranks) {
  const std::string why = no_room(ctx, name, batch, arena, input, optimiser);
  const bool refused = ranks > 1 ? any_rank(!why.empty()) : !why.empty();
  if (!refused) return;
  if (ranks == 1) fail_out_of_memory(why);
  throw OutOfMemoryOnEveryRank(why.empty() ? name + ": another rank's GPU has no room for the step at a batch of " +
                                                 std::to_string(batch)
                                           : why);
}

}  // namespace

// One batch in flight: the same layout in pinned host memory and on the device, so that one copy
// moves all of it.
struct GpuStep::Slot {
  size_t px = 0, flips = 0, labels = 0, keys = 0, scalars = 0, bytes = 0;  // offsets
  PinnedBuffer host;
  DeviceBuffer<unsigned char> dev;  // a place in the step's arena
  // Recorded inside the step (and so inside its graph): a slot's graph always records these.
  CudaEvent fwd, bwd, comm;
  // The device part is requested from the arena; the host part is allocated once the step is
  // known to fit (see GpuStep's constructor).
  Slot(Arena& arena, size_t sample_bytes, int n) {
    px = 0;
    flips = align_up(px + sample_bytes * n);
    labels = align_up(flips + n);
    keys = align_up(labels + sizeof(int32_t) * n);
    scalars = align_up(keys + sizeof(uint64_t) * n);
    bytes = align_up(scalars + sizeof(StepScalars));
    arena.request(dev, bytes);
  }
  template <typename T>
  T* d(size_t off) const {
    return reinterpret_cast<T*>(dev.get() + off);
  }
  template <typename T>
  T* h(size_t off) const {
    return reinterpret_cast<T*>(host.data() + off);
  }
};

// Recorded around a part (a micro-batch, or the step's whole batch), outside its graph. ready: the
// compute stream finished the part before; h2d: this part's samples are on the device; start: the
// compute stream begins; end: the part's last kernel is done. step and last: the optimiser step the
// part belongs to, and whether it is that step's last part (which holds the step's verdict).
struct GpuStep::StepEvents {
  CudaEvent ready, h2d, start, end;
  long long step = 0;
  bool last = true;
};

GpuStep::GpuStep(int device, const Net& net, const Optimizer& opt, const SampleFormat& sample, int max_batch, int rank,
                 int ranks, const GpuStepOptions& o, const WeightAverage* average)
    : ctx_(device, o.workspace_bytes, o.math), net_(ctx_, net, max_batch, &arena_, o.input_fold), host_opt_(opt),
      max_batch_(max_batch), ranks_(ranks), o_(o) {
  ctx_.set_algo_search(o.algos);
  name_ = current_device_text();
  Net& cpu = const_cast<Net&>(net);  // read-only use: the accessors are not const
  input_ = {max_batch, sample.channels, sample.height, sample.width, net_.input_layout()};
  built_ = net.built_input();  // the largest input: every buffer below is sized for it
  if (built_.c != input_.c || built_.h != input_.h || built_.w != input_.w)
    fail("GpuStep: the net's input differs from the augmented sample shape");
  // Every device buffer is requested first, so that a step too large for the device is refused
  // before the arena and the pinned host buffers are allocated.
  const size_t net_bytes = arena_.bytes();
  arena_.request(x_,
                 size_t(max_batch) * net_.input_layout().sample_size() * (ctx_.bf16() ? sizeof(bf16) : sizeof(float)));
  const size_t x_bytes = arena_.bytes() - net_bytes;
  arena_.request(m_, opt.m.size());
  arena_.request(v_, std::max<size_t>(1, opt.v.size()));
  if (!opt.no_decay.empty()) arena_.request(no_decay_, opt.no_decay.size());
  request_lars(cpu.weights().size());
  const size_t opt_bytes = arena_.bytes() - net_bytes - x_bytes;
  arena_.request(scale_shift_, 2 * size_t(sample.channels));
  arena_.request(acc_, 4);
  const size_t before_slots = arena_.bytes();
  for (int i = 0; i < 2; ++i) slots_.push_back(std::make_unique<Slot>(arena_, sample.bytes(), max_batch));
  const size_t input_bytes = x_bytes + (arena_.bytes() - before_slots);
  if (o.skip_nonfinite && !cpu.state().empty()) arena_.request(state_before_, cpu.state().size());
  if (average) {
    decay_ = average->decay;
    arena_.request(avg_w_, average->weights.size());
    if (!average->state.empty()) arena_.request(avg_s_, average->state.size());
  }
  if (o.accumulate < 1) fail("GpuStep: accumulate must be at least 1");
  if (o.accumulate > 1) {  // the net's own buffers are bound only at commit: sized by the CPU net
    arena_.request(grad_sum_, cpu.weights().size());
    arena_.request(carry_, 1);
  }
  if (ranks > 1) sync_ = std::make_unique<GradientSync>(arena_, net, ranks, o.sync);
  check_fits(ctx_, name_, max_batch, arena_.bytes(), input_bytes, opt_bytes, ranks);
  arena_.commit();
  for (auto& sl : slots_) sl->host = PinnedBuffer(sl->bytes, "a batch's pinned copy");
  losses_host_ = PinnedBuffer(sizeof(float) * max_batch);
  probs_host_ = PinnedBuffer(sizeof(float) * max_batch * std::max(1, net.classes()));
  acc_host_ = PinnedBuffer(4 * sizeof(double));
  checks_host_ = PinnedBuffer(2 * sizeof(StepScalars));
  std::memset(checks_host_.data(), 0, checks_host_.size());
  std::vector<float> ss(sample.scale);
  ss.insert(ss.end(), sample.shift.begin(), sample.shift.end());
  scale_shift_.upload(ss.data(), ss.size());
  net_.upload(cpu.weights(), cpu.state());
  m_.upload(opt.m.data(), opt.m.size());
  if (!opt.v.empty()) v_.upload(opt.v.data(), opt.v.size());
  if (!opt.no_decay.empty()) no_decay_.upload(opt.no_decay.data(), opt.no_decay.size());
  if (lars_tensors_.size()) {
    lars_tensors_.upload(host_opt_.lars.tensors.data(), host_opt_.lars.tensors.size());
    lars_chunks_.upload(host_opt_.lars.chunks.data(), host_opt_.lars.chunks.size());
  }
  if (average) avg_w_.upload(average->weights.data(), average->weights.size());
  if (avg_s_.size()) avg_s_.upload(average->state.data(), average->state.size());
  CONVOY_CUDA_CHECK(cudaMemset(acc_.get(), 0, 4 * sizeof(double)));
  if (grad_sum_.size()) CONVOY_CUDA_CHECK(cudaMemset(grad_sum_.get(), 0, grad_sum_.size() * sizeof(float)));
  if (carry_.size()) CONVOY_CUDA_CHECK(cudaMemset(carry_.get(), 0, sizeof(MicroCarry)));
  if (sync_) sync_->start(rank, net_.grads());
  for (int i = 0; i < 4; ++i) events_.push_back(std::make_unique<StepEvents>());
  profile_ = o.profile;
  net_.set_profiling(o.profile);
  CONVOY_CUDA_CHECK(cudaDeviceSynchronize());
}

GpuStep::~GpuStep() {
  // Queued work must not outlive the buffers it reads; errors cannot be thrown from here.
  if (cudaDeviceSynchronize() != cudaSuccess) cudaGetLastError();
}

// [data] progressive: the net and the input's normalisation at the size of b's samples, before any
// of its work is queued (what is queued already keeps its size: kernels take their arguments at
// launch, a graph at its capture). The slots and the input buffer have room for the largest.
void GpuStep::use_input(const HostBatch& b) {
  const Dims d = batch_input(b, built_);
  if (b.pixels.size() != size_t(b.n) * d.size())
    fail("GpuStep: a batch whose pixels are not " + std::to_string(b.n) + " samples of " + dims_text(d));
  net_.set_input(d.h, d.w);  // refuses a size larger than the net as built
  input_.h = d.h, input_.w = d.w;
  input_.packed = net_.input_layout();
}

// The slot's raw batch to the net's input: fp32 NCHW, or bf16 NHWC for a bf16 net.
void GpuStep::queue_normalize(const Slot& sl, int n) {
  InputShape a = input_;
  a.n = n;
  if (net_.stores_bf16())
    normalize_input(ctx_, a, sl.d<uint8_t>(sl.px), sl.d<uint8_t>(sl.flips), scale_shift_.get(),
                    reinterpret_cast<bf16*>(x_.get()), Layout::nhwc);
  else
    normalize_input(ctx_, a, sl.d<uint8_t>(sl.px), sl.d<uint8_t>(sl.flips), scale_shift_.get(),
                    reinterpret_cast<float*>(x_.get()), Layout::nchw);
}

void GpuStep::queue_compute(int slot, int n, Part part) {
  const Slot& sl = *slots_[slot];
  cudaStream_t s = ctx_.stream();
  StepScalars* scalars = sl.d<StepScalars>(sl.scalars);
  const int32_t* labels = sl.d<int32_t>(sl.labels);
  queue_normalize(sl, n);
  if (state_before_.size() && part.first)
    CONVOY_CUDA_CHECK(cudaMemcpyAsync(state_before_.get(), net_.state(), state_before_.size() * sizeof(float),
                                      cudaMemcpyDeviceToDevice, s));
  net_.forward(n, x_.get(), labels, true, &scalars->key, sl.d<uint64_t>(sl.keys));
  queue_metrics(n, labels, scalars, part);
  record_event(sl.fwd.get(), s);
  if (part.last) {
    queue_backward_and_update(sl, scalars);
    if (state_before_.size())
      restore_if_nonfinite(ctx_, state_before_.size(), net_.state(), state_before_.get(), scalars);
    // The moving average follows the update (a skipped step's leaves it as it was).
    average_into(s, avg_w_.size(), avg_w_.get(), net_.weights(), decay_, scalars);
    average_into(s, avg_s_.size(), avg_s_.get(), net_.state(), decay_, scalars);
  } else {
    // A micro-batch before the last: its gradients join the sum; nothing is reduced or updated.
    net_.backward();
    add_gradients(s, 0, net_.param_count(), net_.grads(), grad_sum_.get());
    record_event(sl.bwd.get(), s);
    record_event(sl.comm.get(), s);
  }
  // The part's loss and verdict (the step's, for its last part), for the host to read once it has
  // waited for this part.
  CONVOY_CUDA_CHECK(cudaMemcpyAsync(checks_host_.data() + slot * sizeof(StepScalars), scalars, sizeof(StepScalars),
                                    cudaMemcpyDeviceToHost, s));
}

// The loss decides whether the update runs (StepScalars::nonfinite). It is known once the forward
// pass is done, and so agreed on (GradientSync::agree) before the backward pass begins, so that
// each bucket's update can start as soon as its all-reduce ends. A micro-batch's figures wait in
// the carry until its step's last part knows the step's verdict.
void GpuStep::queue_metrics(int n, const int32_t* labels, StepScalars* scalars, Part part) {
  if (part.first && part.last)
    return batch_metrics(ctx_, n, net_.classes(), net_.probs(), labels, net_.losses(), acc_.get(), scalars);
  batch_metrics(ctx_, n, net_.classes(), net_.probs(), labels, net_.losses(), carry_.get()->sums, scalars);
  if (part.last)
    close_micro_batches(ctx_.stream(), scalars, carry_.get(), acc_.get(), o_.accumulate);
  else
    carry_micro_batch(ctx_.stream(), scalars, carry_.get());
}

// One rank: the update over the whole buffer follows the backward pass. Several: the gradients are
// averaged in buckets as the backward pass completes them, and updated bucket by bucket (or at once).
// With accumulation each range of the gradients becomes the step's mean (the micro-batches' sum
// joined) as the backward pass completes it, before its all-reduce or update.
void GpuStep::queue_backward_and_update(const Slot& sl, StepScalars* scalars) {
  cudaStream_t s = ctx_.stream();
  const GradientSync::Update update = [this, scalars](const UpdateSpan& at, const Gradients& g) {
    queue_update(at, g, scalars);
  };
  const auto mean = [&](size_t lo, size_t hi) {
    if (grad_sum_.size()) finish_gradients(s, lo, hi, net_.grads(), grad_sum_.get(), o_.accumulate);
  };
  if (!sync_) {
    net_.backward();
    mean(0, net_.param_count());
    record_event(sl.bwd.get(), s);
    record_event(sl.comm.get(), s);
    return update({0, net_.param_count(), s}, Gradients{net_.grads()});
  }
  sync_->agree(s, &scalars->nonfinite, &scalars->key);
  net_.backward([&](size_t lo, size_t hi) {
    mean(lo, hi);
    sync_->ready(s, {lo, hi}, update);
  });
  record_event(sl.bwd.get(), s);
  sync_->wait_for_comm(s);
  record_event(sl.comm.get(), s);
  sync_->finish(s, update);
}

// LARS's plan and scratch, where the optimiser is LARS and the net has parameters.
void GpuStep::request_lars(size_t params) {
  const LarsPlan& p = host_opt_.lars;
  if (host_opt_.kind != OptimizerKind::lars || p.empty()) return;
  // The net's own count: the arena's buffers may be longer (rounded up to its alignment).
  if (p.params() != params) fail("GpuStep: the LARS plan does not cover the net's parameters");
  arena_.request(lars_tensors_, p.tensors.size());
  arena_.request(lars_chunks_, p.chunks.size());
  arena_.request(lars_sums_, 2 * p.chunks.size());
  arena_.request(lars_rates_, p.tensors.size());
}

LarsDevice GpuStep::lars_device() const {
  return {&host_opt_.lars, lars_tensors_.get(), lars_chunks_.get(), lars_sums_.get(), lars_rates_.get()};
}

void GpuStep::queue_update(const UpdateSpan& at, const Gradients& g, const StepScalars* scalars) {
  const TrainRecipe& r = host_opt_.recipe;
  const uint32_t* skip = no_decay_.size() ? no_decay_.get() : nullptr;
  if (host_opt_.kind == OptimizerKind::lars)
    lars_update(at, net_.weights(), g, m_.get(), scalars, lars_device(), float(r.momentum), r.nesterov,
                float(r.weight_decay), float(r.lars_trust), float(r.lars_eps), net_.weight_copy());
  else if (host_opt_.kind == OptimizerKind::sgd)
    sgd_update(at, net_.weights(), g, m_.get(), scalars, float(r.momentum), r.nesterov, float(r.weight_decay),
               net_.weight_copy(), skip);
  else
    adam_update(at, net_.weights(), g, m_.get(), v_.get(), scalars, float(r.beta1), float(r.beta2), float(r.adam_eps),
                float(r.weight_decay), host_opt_.kind == OptimizerKind::adamw, net_.weight_copy(), skip);
}

void GpuStep::train(const HostBatch& b, uint64_t key, double lr) {
  if (b.pixels.empty() || b.n <= 0 || b.flips.size() != size_t(b.n))
    fail("GpuStep: the loader must hand over raw batches");
  const int k = o_.accumulate;
  if (b.n % k != 0) fail("GpuStep: a batch that does not split into its micro-batches");
  if (b.n / k > max_batch_) fail("GpuStep: batch larger than the one it was built for");
  use_input(b);
  ++host_opt_.t;
  const TrainRecipe& r = host_opt_.recipe;
  const StepScalars sc = step_scalars(key, lr, r.beta1, r.beta2, host_opt_.t);
  const int n = b.n / k;
  for (int i = 0; i < k; ++i) queue_part(b, i * n, n, sc, Part{i == 0, i + 1 == k});
  ++step_;
}

// b's samples [from, from + n) into the next slot, and their part of the step queued.
void GpuStep::queue_part(const HostBatch& b, int from, int n, const StepScalars& sc, Part part) {
  const long long k = parts_;
  const int slot = int(k % 2);
  // The part two before used this slot: its buffers are free once it is done. This is also the
  // only place the host waits, which keeps it at most two parts ahead of the GPU.
  while (!pending_.empty() && pending_.front() <= k - 2) {
    CONVOY_CUDA_CHECK(cudaEventSynchronize(events_[size_t(pending_.front() % 4)]->end.get()));
    harvest(pending_.front());
    pending_.pop_front();
  }
  Slot& sl = *slots_[slot];
  const size_t px = b.pixels.size() / size_t(b.n);
  std::memcpy(sl.h<uint8_t>(sl.px), b.pixels.data() + size_t(from) * px, size_t(n) * px);
  std::memcpy(sl.h<uint8_t>(sl.flips), b.flips.data() + from, size_t(n));
  std::memcpy(sl.h<int32_t>(sl.labels), b.labels.data() + from, size_t(n) * sizeof(int32_t));
  if (!b.keys.empty()) std::memcpy(sl.h<uint64_t>(sl.keys), b.keys.data() + from, size_t(n) * sizeof(uint64_t));
  std::memcpy(sl.h<StepScalars>(sl.scalars), &sc, sizeof sc);

  StepEvents& e = *events_[size_t(k % 4)];
  e.step = step_;
  e.last = part.last;
  cudaStream_t s = ctx_.stream(), cs = copy_stream_.get();
  CONVOY_CUDA_CHECK(cudaMemcpyAsync(sl.dev.get(), sl.host.data(), sl.bytes, cudaMemcpyHostToDevice, cs));
  CONVOY_CUDA_CHECK(cudaEventRecord(e.h2d.get(), cs));
  CONVOY_CUDA_CHECK(cudaEventRecord(e.ready.get(), s));
  CONVOY_CUDA_CHECK(cudaStreamWaitEvent(s, e.h2d.get(), 0));
  CONVOY_CUDA_CHECK(cudaEventRecord(e.start.get(), s));
  // The first step runs op by op (cuDNN, cuBLAS and NCCL set themselves up on first use, which a
  // capture forbids); each slot's graph of each kind of part is captured at its first full part
  // after that. So does the first step at each input size ([data] progressive): its convolutions'
  // plans for that size are made then (plan_for), and their algorithm search may not be captured.
  // Each size keeps its own graphs: a graph replays the sizes it was captured with.
  auto [sized, fresh] = graphs_.try_emplace(std::make_pair(input_.h, input_.w));
  if (fresh) sized->second.first_step = step_;
  if (o_.graph && n == max_batch_ && step_ > sized->second.first_step) {
    CudaGraphExec& graph = sized->second.graph[graph_index(slot, part)];
    if (!graph) {
      CONVOY_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      queue_compute(slot, n, part);
      graph = CudaGraphExec::end_capture(s);
    }
    graph.launch(s);
  } else {
    queue_compute(slot, n, part);
  }
  CONVOY_CUDA_CHECK(cudaEventRecord(e.end.get(), s));
  pending_.push_back(k);
  if (gap_from_ < 0) gap_from_ = k + 1;
  ++parts_;
  if (profile_) {  // the node events are re-recorded by the next part: read them now
    drain();
    net_.collect_profile();
  }
}

void GpuStep::add_profile_to(Net& net) { net_.move_profile_to(net); }

void GpuStep::harvest(long long j) {
  const StepEvents& e = *events_[size_t(j % 4)];
  const Slot& sl = *slots_[size_t(j % 2)];
  times_.h2d += elapsed_seconds(e.ready.get(), e.start.get());
  if (j >= gap_from_) times_.idle += elapsed_seconds(events_[size_t((j + 3) % 4)]->end.get(), e.ready.get());
  times_.fwd += elapsed_seconds(e.start.get(), sl.fwd.get());
  times_.bwd += elapsed_seconds(sl.fwd.get(), sl.bwd.get());
  times_.comm_exposed += elapsed_seconds(sl.bwd.get(), sl.comm.get());
  times_.update += elapsed_seconds(sl.comm.get(), e.end.get());
  if (!e.last) return;  // a step's verdict is its last part's
  ++times_.steps;
  StepScalars c;
  std::memcpy(&c, checks_host_.data() + size_t(j % 2) * sizeof(StepScalars), sizeof c);
  if (c.nonfinite) {
    ++skipped_;
    if (nonfinite_.step < 0) nonfinite_ = {e.step, c.loss};
  }
}

void GpuStep::drain() {
  ctx_.synchronize();
  for (long long j : pending_) harvest(j);
  pending_.clear();
  // The next step's gap to this one would include whatever the host does before queuing it.
  gap_from_ = -1;
}

StepMetrics GpuStep::take_metrics() {
  drain();
  double* a = reinterpret_cast<double*>(acc_host_.data());
  CONVOY_CUDA_CHECK(cudaMemcpy(a, acc_.get(), 4 * sizeof(double), cudaMemcpyDeviceToHost));
  CONVOY_CUDA_CHECK(cudaMemsetAsync(acc_.get(), 0, 3 * sizeof(double), ctx_.stream()));
  const StepMetrics m{a[0], a[1], a[2], a[3], skipped_};
  skipped_ = 0;
  return m;
}

StepTimes GpuStep::take_times() {
  drain();
  StepTimes t = times_;
  times_ = StepTimes{};
  if (sync_) t.fp8_clipped = sync_->take_clipped();
  return t;
}

// Evaluation runs a batch at a time and waits for each: op by op its host work (a launch per kernel,
// cuDNN's and cuBLAS's own calls) is longer than a small net's forward pass, so each shape's pass is
// replayed from a graph, as the training step is.
void GpuStep::evaluate(const HostBatch& b) {
  if (b.pixels.empty() || b.n <= 0 || b.n > max_batch_ || b.flips.size() != size_t(b.n))
    fail("GpuStep: evaluation needs a raw batch within the built size");
  drain();
  use_input(b);
  Slot& sl = *slots_[0];
  std::memcpy(sl.h<uint8_t>(sl.px), b.pixels.data(), b.pixels.size());
  std::memcpy(sl.h<uint8_t>(sl.flips), b.flips.data(), b.flips.size());
  std::memcpy(sl.h<int32_t>(sl.labels), b.labels.data(), b.labels.size() * sizeof(int32_t));
  const StepScalars sc{};
  std::memcpy(sl.h<StepScalars>(sl.scalars), &sc, sizeof sc);
  cudaStream_t s = ctx_.stream();
  CONVOY_CUDA_CHECK(cudaMemcpyAsync(sl.dev.get(), sl.host.data(), sl.bytes, cudaMemcpyHostToDevice, s));
  EvalGraph& g = eval_graphs_[{input_.h, input_.w, b.n}];
  if (o_.graph && !profile_ && g.planned) {
    if (!g.graph) {
      CONVOY_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      queue_evaluation(sl, b.n);
      g.graph = CudaGraphExec::end_capture(s);
    }
    g.graph.launch(s);
  } else {
    queue_evaluation(sl, b.n);
    g.planned = true;
  }
  CONVOY_CUDA_CHECK(
      cudaMemcpyAsync(losses_host_.data(), net_.losses(), b.n * sizeof(float), cudaMemcpyDeviceToHost, s));
  CONVOY_CUDA_CHECK(cudaMemcpyAsync(probs_host_.data(), net_.probs(), size_t(b.n) * net_.classes() * sizeof(float),
                                    cudaMemcpyDeviceToHost, s));
  ctx_.synchronize();
}

void GpuStep::queue_evaluation(const Slot& sl, int n) {
  queue_normalize(sl, n);
  net_.forward(n, x_.get(), sl.d<int32_t>(sl.labels), false, &sl.d<StepScalars>(sl.scalars)->key,
               sl.d<uint64_t>(sl.keys));
}

void GpuStep::sync_to(Net& net, Optimizer& opt, WeightAverage* average) {
  drain();
  net_.download(net.weights(), net.state());
  m_.download(opt.m.data(), opt.m.size());
  if (!opt.v.empty()) v_.download(opt.v.data(), opt.v.size());
  opt.t = host_opt_.t;
  if (average && avg_w_.size()) avg_w_.download(average->weights.data(), average->weights.size());
  if (average && avg_s_.size()) avg_s_.download(average->state.data(), average->state.size());
}

// Between steps (the queued ones done), so that no captured step sees the exchange half made; a
// bf16 net's weight copy follows the weights it now holds.
void GpuStep::swap_average() {
  if (!avg_w_.size()) return;
  drain();
  swap_arrays(ctx_.stream(), avg_w_.size(), avg_w_.get(), net_.weights());
  swap_arrays(ctx_.stream(), avg_s_.size(), avg_s_.get(), net_.state());
  net_.refresh_weight_copy();
  ctx_.synchronize();
}

// Between steps (the queued ones done), as swap_average: no captured step reads the statistics
// while they are replaced.
void GpuStep::sync_state() {
  if (!sync_) return;
  drain();
  sync_->broadcast_from_first(ctx_.stream(), net_.state(), net_.state_count());
  if (avg_s_.size()) sync_->broadcast_from_first(ctx_.stream(), avg_s_.get(), avg_s_.size());
  fp8_maxima_ = sync_->agreed_maxima(ctx_.stream());
  ctx_.synchronize();
}

}  // namespace convoy::gpu
