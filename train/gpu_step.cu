// GpuStep: the CUDA backend's training step. Every buffer is made in the constructor; a step
// queues copies and kernels on one stream and synchronises once, to bring back the losses.
#include "train/gpu_step.h"

#include <numeric>

namespace convoy::gpu {
namespace {

enum Mark { kStart, kH2d, kFwd, kBwd, kComm, kUpdate, kMarks };

}  // namespace

GpuStep::GpuStep(int device, const Net& net, const Optimizer& opt, int max_batch, int rank, int ranks,
                 MathMode math)
    : ctx_(device, size_t(256) << 20, math), net_(ctx_, net, max_batch), host_opt_(opt), ranks_(ranks),
      x_(size_t(max_batch) * net.input_dims().size()), m_(opt.m.size()), v_(std::max<size_t>(1, opt.v.size())),
      labels_(max_batch), keys_(max_batch), losses_(max_batch), probs_(size_t(max_batch) * net.classes()) {
  name_ = "cuda:" + std::to_string(device);
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, device) == cudaSuccess) name_ += std::string(" (") + prop.name + ")";
  Net& cpu = const_cast<Net&>(net);  // read-only use: the accessors are not const
  net_.upload(cpu.weights(), cpu.state());
  m_.upload(opt.m.data(), opt.m.size());
  if (!opt.v.empty()) v_.upload(opt.v.data(), opt.v.size());
  if (ranks > 1) nccl_ = std::make_unique<NcclComm>(rank, ranks);
  events_.resize(kMarks);
  for (auto& e : events_) CONVOY_CUDA_CHECK(cudaEventCreate(&e));
}

GpuStep::~GpuStep() {
  for (auto e : events_)
    if (e) cudaEventDestroy(e);
}

void GpuStep::upload(const HostBatch& b) {
  const size_t xs = size_t(b.n) * (x_.size() / labels_.size());
  CONVOY_CUDA_CHECK(cudaMemcpyAsync(x_.get(), b.x.data(), xs * sizeof(float), cudaMemcpyHostToDevice, ctx_.stream()));
  CONVOY_CUDA_CHECK(cudaMemcpyAsync(labels_.get(), b.labels.data(), b.n * sizeof(int32_t), cudaMemcpyHostToDevice, ctx_.stream()));
  if (!b.keys.empty())
    CONVOY_CUDA_CHECK(cudaMemcpyAsync(keys_.get(), b.keys.data(), b.n * sizeof(uint64_t), cudaMemcpyHostToDevice, ctx_.stream()));
}

double GpuStep::train(const HostBatch& b, uint64_t key, double lr) {
  cudaStream_t s = ctx_.stream();
  CONVOY_CUDA_CHECK(cudaEventRecord(events_[kStart], s));
  upload(b);
  CONVOY_CUDA_CHECK(cudaEventRecord(events_[kH2d], s));
  net_.forward(b.n, x_.get(), labels_.get(), true, key, keys_.get());
  CONVOY_CUDA_CHECK(cudaEventRecord(events_[kFwd], s));
  net_.backward();
  CONVOY_CUDA_CHECK(cudaEventRecord(events_[kBwd], s));
  const size_t params = net_.param_count();
  if (nccl_) CONVOY_NCCL_CHECK(ncclAllReduce(net_.grads(), net_.grads(), params, ncclFloat, ncclAvg, nccl_->get(), s));
  CONVOY_CUDA_CHECK(cudaEventRecord(events_[kComm], s));
  const TrainRecipe& r = host_opt_.recipe;
  ++host_opt_.t;
  if (r.optimizer == "sgd")
    sgd_update(ctx_, params, net_.weights(), net_.grads(), m_.get(), float(lr), float(r.momentum), r.nesterov,
               float(r.weight_decay));
  else
    adam_update(ctx_, params, net_.weights(), net_.grads(), m_.get(), v_.get(), float(lr), float(r.beta1),
                float(r.beta2), float(r.adam_eps), float(r.weight_decay), r.optimizer == "adamw", host_opt_.t);
  CONVOY_CUDA_CHECK(cudaEventRecord(events_[kUpdate], s));
  CONVOY_CUDA_CHECK(cudaMemcpyAsync(losses_.data(), net_.losses(), b.n * sizeof(float), cudaMemcpyDeviceToHost, s));
  CONVOY_CUDA_CHECK(cudaMemcpyAsync(probs_.data(), net_.probs(), size_t(b.n) * net_.classes() * sizeof(float),
                                    cudaMemcpyDeviceToHost, s));
  ctx_.synchronize();
  float ms[kMarks] = {0};
  for (int i = kH2d; i < kMarks; ++i) CONVOY_CUDA_CHECK(cudaEventElapsedTime(&ms[i], events_[i - 1], events_[i]));
  times_.h2d += ms[kH2d] / 1e3;
  times_.fwd += ms[kFwd] / 1e3;
  times_.bwd += ms[kBwd] / 1e3;
  times_.comm += ms[kComm] / 1e3;
  times_.update += ms[kUpdate] / 1e3;
  return std::accumulate(losses_.begin(), losses_.begin() + b.n, 0.0) / b.n;
}

void GpuStep::evaluate(const HostBatch& b) {
  upload(b);
  net_.forward(b.n, x_.get(), labels_.get(), false, 0, keys_.get());
  CONVOY_CUDA_CHECK(cudaMemcpyAsync(losses_.data(), net_.losses(), b.n * sizeof(float), cudaMemcpyDeviceToHost, ctx_.stream()));
  CONVOY_CUDA_CHECK(cudaMemcpyAsync(probs_.data(), net_.probs(), size_t(b.n) * net_.classes() * sizeof(float),
                                    cudaMemcpyDeviceToHost, ctx_.stream()));
  ctx_.synchronize();
}

void GpuStep::sync_to(Net& net, Optimizer& opt) {
  net_.download(net.weights(), net.state());
  m_.download(opt.m.data(), opt.m.size());
  if (!opt.v.empty()) v_.download(opt.v.data(), opt.v.size());
  opt.t = host_opt_.t;
}

StepTimes GpuStep::take_times() {
  StepTimes t = times_;
  times_ = StepTimes{};
  return t;
}

}  // namespace convoy::gpu
