// The CPU backend's step: the reference net's forward and backward on this rank's batch (or on its
// [train] accumulate micro-batches, their gradients summed), the MPI average of the gradients, the
// optimiser's update and the weights' moving average, with the same non-finite-loss rules as the
// GPU's; and its forward pass in evaluation mode.
#pragma once
#include <memory>
#include <vector>

#include "shared/timer.h"
#include "train/step.h"

namespace convoy {

class CpuForward final : public Forward {
 public:
  explicit CpuForward(Net& net) : net_(net) {}
  void evaluate(const HostBatch& b) override;  // b.x: normalised floats
  const float* losses() const override { return net_.losses(); }
  const float* probs() const override { return net_.probs(); }

 private:
  Net& net_;
};

class CpuStep final : public Step {
 public:
  // Trains net and opt in place; each batch as `accumulate` micro-batches of b.n / accumulate.
  CpuStep(Net& net, Optimizer& opt, int ranks, bool skip_nonfinite, WeightAverage* average = nullptr,
          int accumulate = 1);
  void train(const HostBatch& b, uint64_t key, double lr, EpochSums& sums) override;
  double fold(EpochSums&) override { return last_loss_; }  // train() added this step's figures already
  NonFiniteLoss first_nonfinite() const override { return nonfinite_; }
  PhaseTimes take_times() override;
  void sync_to(Net&, Optimizer&) override {}
  void swap_average() override;
  void sync_state() override;
  void add_profile_to(Net&) override {}
  std::optional<double> setup_seconds() const override { return std::nullopt; }
  void evaluate(const HostBatch& b) override { forward_.evaluate(b); }
  const float* losses() const override { return forward_.losses(); }
  const float* probs() const override { return forward_.probs(); }

 private:
  // A batch's forward and backward passes: its loss (the mean of its micro-batches' mean losses,
  // or the first that is not finite, after which no more are run) and top-1 hits.
  struct Tally {
    double loss = 0, top1 = 0;
    bool finite = true;
  };
  Tally forward_and_backward(const HostBatch& b, uint64_t key);
  void update(int n, const Tally& t, double lr, EpochSums& sums);
  void skip(EpochSums& sums);

  Net& net_;
  Optimizer& opt_;
  CpuForward forward_;
  int ranks_;
  bool skip_nonfinite_;
  WeightAverage* average_;  // null: no moving average
  int accumulate_;
  std::vector<float> grad_sum_;      // accumulate > 1: the gradients of the micro-batches before the last
  std::vector<float> state_before_;  // skip_nonfinite: batch norm's running statistics before the step
  long long steps_ = 0;
  double last_loss_ = 0;
  NonFiniteLoss nonfinite_;
  PhaseTimes times_;
  Stopwatch lap_;
};

std::unique_ptr<Step> make_cpu_step(const StepSetup& s);

}  // namespace convoy
