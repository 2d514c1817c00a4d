// The step factory of a CUDA build: the CPU step, or GpuStep behind the Step interface on this
// node's GPU (local rank mod the GPUs visible), logged once with how it was set up.
#include "train/step.h"

#include <cstdio>
#include <string>

#include "shared/error.h"
#include "shared/log.h"
#include "shared/timer.h"
#include "train/cpu_step.h"
#include "train/gpu_info.h"
#include "train/gpu_step.h"

namespace convoy {
namespace {

gpu::MathMode math_mode(Precision p) {
  switch (p) {
    case Precision::fp32: return gpu::MathMode::fp32;
    case Precision::bf16: return gpu::MathMode::bf16;
    case Precision::tf32: break;
  }
  return gpu::MathMode::tf32;
}

const char* input_fold_note(InputFold f) {
  switch (f) {
    case InputFold::patches: return ", input as the first convolution's windows (patches)";
    case InputFold::blocks: return ", input as 2x2 pixel blocks (space to depth)";
    case InputFold::none: break;
  }
  return "";
}

gpu::AlgoSearch algo_search(ConvAlgos a) {
  switch (a) {
    case ConvAlgos::measure: return gpu::AlgoSearch::measure;
    case ConvAlgos::fastest: return gpu::AlgoSearch::fastest;
    case ConvAlgos::heuristic: break;
  }
  return gpu::AlgoSearch::heuristic;
}

gpu::GpuStepOptions gpu_options(const StepSetup& s) {
  gpu::GpuStepOptions go;
  go.math = math_mode(s.backend.precision);
  go.graph = s.backend.cuda_graph;
  go.input_fold = s.backend.input_fold;
  go.skip_nonfinite = s.skip_nonfinite;
  go.accumulate = s.accumulate;
  go.profile = s.profile;
  go.workspace_bytes = size_t(s.backend.cudnn_workspace_mb) << 20;
  go.algos = algo_search(s.backend.conv_algos);
  go.sync.precision = grad_comm_for(s.backend.grad_comm, s.backend.precision);
  go.sync.bucket_bytes = size_t(s.backend.bucket_mb * double(1 << 20));
  go.sync.bucket_updates = s.backend.bucket_updates;
  return go;
}

std::string sync_note(const StepSetup& s, const gpu::GpuStep& step) {
  if (s.ranks < 2) return "";
  char text[320];
  std::snprintf(text, sizeof text,
                ", gradients averaged with NCCL in %s (%.1f MB a step on the wire) in buckets of up to %.3g MiB of "
                "fp32 gradients overlapping the backward pass, %s",
                name_of(grad_comm_names(), grad_comm_for(s.backend.grad_comm, s.backend.precision)).c_str(),
                step.comm_bytes_per_step() / 1e6, s.backend.bucket_mb,
                s.backend.bucket_updates ? "each bucket updated as its all-reduce ends" : "updated after the last");
  return text;
}

// GpuStep keeps the training figures and the phase times on the GPU: they are read (and waited
// for) only at fold() and take_times().
class GpuBackendStep final : public Step {
 public:
  GpuBackendStep(std::unique_ptr<gpu::GpuStep> step, double setup_s, WeightAverage* average)
      : step_(std::move(step)), setup_s_(setup_s), average_(average) {}
  void train(const HostBatch& b, uint64_t key, double lr, EpochSums&) override { step_->train(b, key, lr); }
  double fold(EpochSums& sums) override {
    const gpu::StepMetrics m = step_->take_metrics();
    sums.loss += m.loss_sum;
    sums.correct += m.hits;
    sums.samples += m.samples;
    sums.skipped += m.skipped;
    return m.last_loss;
  }
  NonFiniteLoss first_nonfinite() const override {
    const gpu::NonFiniteStep bad = step_->first_nonfinite();
    return {bad.step, double(bad.loss)};
  }
  // t_h2d is the time the GPU waited for a batch's copy, t_comm_exposed the all-reduce not hidden
  // behind the backward pass, t_idle the time it waited for the host to queue a step.
  PhaseTimes take_times() override {
    const gpu::StepTimes g = step_->take_times();
    PhaseTimes t{g.h2d,  g.fwd, g.bwd, g.update, g.comm_exposed, g.idle, double(g.steps) * step_->comm_bytes_per_step(),
                 g.steps};
    if (step_->fp8_on_the_wire()) t.fp8_clipped = g.fp8_clipped;
    return t;
  }
  void sync_to(Net& net, Optimizer& opt) override { step_->sync_to(net, opt, average_); }
  void swap_average() override { step_->swap_average(); }
  void sync_state() override { step_->sync_state(); }
  std::vector<float> wire_maxima() const override { return step_->fp8_maxima(); }
  bool set_wire_maxima(const std::vector<float>& m) override { return step_->set_fp8_maxima(m); }
  void add_profile_to(Net& net) override { step_->add_profile_to(net); }
  std::optional<double> setup_seconds() const override { return setup_s_; }
  std::optional<double> device_bytes() const override { return double(step_->device_bytes()); }
  void evaluate(const HostBatch& b) override { step_->evaluate(b); }
  const float* losses() const override { return step_->losses(); }
  const float* probs() const override { return step_->probs(); }

 private:
  std::unique_ptr<gpu::GpuStep> step_;
  double setup_s_;
  WeightAverage* average_;  // the host's copy of the moving average (null: none)
};

std::unique_ptr<Step> make_gpu_step(const StepSetup& s) {
  const int device = s.local_rank % gpu_count();
  Stopwatch setup_clock;  // context, handles, arena, weights up
  auto step = std::make_unique<gpu::GpuStep>(device, s.net, s.opt, s.sample, s.max_batch, s.rank, s.ranks,
                                             gpu_options(s), s.average);
  const double setup_s = setup_clock.seconds();
  log_info(
      "CUDA backend on %s (rank 0, set up in %.2f s), %.0f MiB of tensors in one arena, %s math, %s convolution "
      "algorithms%s, %s%s; %s",
      step->device_name(), setup_s, double(step->arena_bytes()) / (1 << 20),
      name_of(precision_names(), s.backend.precision).c_str(),
      name_of(conv_algos_names(), s.backend.conv_algos).c_str(), input_fold_note(step->input_fold()),
      s.backend.cuda_graph ? "step captured as a CUDA graph" : "step queued op by op", sync_note(s, *step).c_str(),
      gpu_libraries().c_str());
  return std::make_unique<GpuBackendStep>(std::move(step), setup_s, s.average);
}

}  // namespace

Backend choose_backend(Device device) {
  const int gpus = gpu_count();
  if (device == Device::cuda && gpus == 0) fail("--device cuda: no CUDA device is visible to this process");
  return device == Device::cuda || (device == Device::automatic && gpus > 0) ? Backend::gpu : Backend::cpu;
}

bool fp8_wire_supported(Device device, int local_rank) {
  const int gpus = device == Device::cpu ? 0 : gpu_count();
  return gpus > 0 && gpu::fp8_wire_supported(local_rank % gpus);
}

std::unique_ptr<Step> make_step(Backend backend, const StepSetup& s) {
  return backend == Backend::gpu ? make_gpu_step(s) : make_cpu_step(s);
}

}  // namespace convoy
