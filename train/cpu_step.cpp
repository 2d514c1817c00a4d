// CpuStep: a step whose loss is not finite (on any rank: all ranks agree, so their weights stay
// the same) does no update; with skip_nonfinite it also puts the running statistics back and still
// counts (the learning-rate schedule, Adam's t), as on the GPU.
#include "train/cpu_step.h"

#include <algorithm>
#include <cmath>

#include "shared/error.h"
#include "train/bucket_plan.h"
#include "train/data_parallel.h"
#include "train/micro_batches.h"

namespace convoy {

void CpuForward::evaluate(const HostBatch& b) {
  net_.set_input(batch_input(b, net_.built_input()));
  net_.forward(b.n, b.x.data(), b.labels.data(), false);
}

CpuStep::CpuStep(Net& net, Optimizer& opt, int ranks, bool skip_nonfinite, WeightAverage* average, int accumulate)
    : net_(net), opt_(opt), forward_(net), ranks_(ranks), skip_nonfinite_(skip_nonfinite), average_(average),
      accumulate_(accumulate) {
  if (accumulate_ > 1) grad_sum_.assign(net_.grads().size(), 0.f);
}

void CpuStep::train(const HostBatch& b, uint64_t key, double lr, EpochSums& sums) {
  lap_.reset();
  // [data] progressive: the epoch's crops may be smaller than the net's input as built.
  net_.set_input(batch_input(b, net_.built_input()));
  if (skip_nonfinite_) state_before_ = net_.state();
  const Tally t = forward_and_backward(b, key);
  last_loss_ = t.loss;
  const long long k = steps_++;
  bool finite = t.finite;
  ++times_.steps;
  if (ranks_ > 1) finite = !any_rank(!finite);
  times_.comm_bytes += ring_allreduce_bytes(sizeof(int), ranks_);
  if (finite) return update(b.n, t, lr, sums);
  if (nonfinite_.step < 0) nonfinite_ = {k, t.loss};
  if (skip_nonfinite_) skip(sums);
}

// The micro-batches are consecutive slices of the batch, so that its samples are trained in the
// order they come in, as without accumulation; each slice's gradients are of its own mean loss.
CpuStep::Tally CpuStep::forward_and_backward(const HostBatch& b, uint64_t key) {
  if (b.n % accumulate_ != 0) fail("CpuStep: a batch that does not split into its micro-batches");
  const int n = b.n / accumulate_;
  const size_t per = b.x.size() / size_t(b.n);
  Tally t;
  for (int i = 0; i < accumulate_; ++i) {
    const size_t at = size_t(i) * size_t(n);
    const double loss = net_.forward(n, b.x.data() + at * per, b.labels.data() + at, true, key,
                                     b.keys.empty() ? nullptr : b.keys.data() + at);
    times_.fwd += lap_.lap();
    if (!std::isfinite(loss)) {
      // The step is not taken: the sum is left clear for the next one.
      std::fill(grad_sum_.begin(), grad_sum_.end(), 0.f);
      return {loss, 0, false};
    }
    double top1 = 0, top5 = 0;
    count_correct(n, net_.classes(), net_.probs(), b.labels.data() + at, top1, top5);
    t.loss += loss / accumulate_;
    t.top1 += top1;
    net_.backward();
    if (accumulate_ > 1 && i + 1 < accumulate_) add_gradients(grad_sum_.size(), net_.grads().data(), grad_sum_.data());
    if (accumulate_ > 1 && i + 1 == accumulate_)
      finish_gradients(grad_sum_.size(), net_.grads().data(), grad_sum_.data(), accumulate_);
    times_.bwd += lap_.lap();
  }
  return t;
}

void CpuStep::update(int n, const Tally& t, double lr, EpochSums& sums) {
  if (ranks_ > 1) average_gradients(net_.grads(), ranks_);
  times_.comm_exposed += lap_.lap();  // nothing hides it on the CPU
  times_.comm_bytes += ring_allreduce_bytes(double(net_.grads().size()) * sizeof(float), ranks_);
  opt_.step(net_.weights(), net_.grads(), lr);
  if (average_) average_->update(net_);
  times_.update += lap_.lap();
  sums.loss += t.loss * n;
  sums.correct += t.top1;
  sums.samples += n;
}

void CpuStep::skip(EpochSums& sums) {
  net_.state() = state_before_;
  ++opt_.t;
  ++sums.skipped;
}

void CpuStep::swap_average() {
  if (average_) average_->swap_with(net_);
}

void CpuStep::sync_state() {
  if (ranks_ == 1) return;
  broadcast_floats(net_.state());
  if (average_) broadcast_floats(average_->state);
}

PhaseTimes CpuStep::take_times() {
  const PhaseTimes t = times_;
  times_ = PhaseTimes{};
  return t;
}

std::unique_ptr<Step> make_cpu_step(const StepSetup& s) {
  return std::make_unique<CpuStep>(s.net, s.opt, s.ranks, s.skip_nonfinite, s.average, s.accumulate);
}

}  // namespace convoy
