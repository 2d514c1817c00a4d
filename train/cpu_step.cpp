// CpuStep: a step whose loss is not finite (on any rank: all ranks agree, so their weights stay
// the same) does no update; with skip_nonfinite it also puts the running statistics back and still
// counts (the learning-rate schedule, Adam's t), as on the GPU.
#include "train/cpu_step.h"

#include <cmath>

#include "train/bucket_plan.h"
#include "train/data_parallel.h"

namespace convoy {

void CpuForward::evaluate(const HostBatch& b) { net_.forward(b.n, b.x.data(), b.labels.data(), false); }

CpuStep::CpuStep(Net& net, Optimizer& opt, int ranks, bool skip_nonfinite, WeightAverage* average)
    : net_(net), opt_(opt), forward_(net), ranks_(ranks), skip_nonfinite_(skip_nonfinite), average_(average) {}

void CpuStep::train(const HostBatch& b, uint64_t key, double lr, EpochSums& sums) {
  lap_.reset();
  if (skip_nonfinite_) state_before_ = net_.state();
  const double loss = net_.forward(b.n, b.x.data(), b.labels.data(), true, key, b.keys.data());
  times_.fwd += lap_.lap();
  last_loss_ = loss;
  const long long k = steps_++;
  bool finite = std::isfinite(loss);
  ++times_.steps;
  if (ranks_ > 1) finite = !any_rank(!finite);
  times_.comm_bytes += ring_allreduce_bytes(sizeof(int), ranks_);
  if (finite) return update(b, loss, lr, sums);
  if (nonfinite_.step < 0) nonfinite_ = {k, loss};
  if (skip_nonfinite_) skip(sums);
}

void CpuStep::update(const HostBatch& b, double loss, double lr, EpochSums& sums) {
  net_.backward();
  times_.bwd += lap_.lap();
  if (ranks_ > 1) average_gradients(net_.grads(), ranks_);
  times_.comm_exposed += lap_.lap();  // nothing hides it on the CPU
  times_.comm_bytes += ring_allreduce_bytes(double(net_.grads().size()) * sizeof(float), ranks_);
  opt_.step(net_.weights(), net_.grads(), lr);
  if (average_) average_->update(net_);
  times_.update += lap_.lap();
  double top1 = 0, top5 = 0;
  count_correct(b.n, net_.classes(), net_.probs(), b.labels.data(), top1, top5);
  sums.loss += loss * b.n;
  sums.correct += top1;
  sums.samples += b.n;
}

void CpuStep::skip(EpochSums& sums) {
  net_.state() = state_before_;
  ++opt_.t;
  ++sums.skipped;
}

void CpuStep::swap_average() {
  if (average_) average_->swap_with(net_);
}

PhaseTimes CpuStep::take_times() {
  const PhaseTimes t = times_;
  times_ = PhaseTimes{};
  return t;
}

std::unique_ptr<Step> make_cpu_step(const StepSetup& s) {
  return std::make_unique<CpuStep>(s.net, s.opt, s.ranks, s.skip_nonfinite, s.average);
}

}  // namespace convoy
