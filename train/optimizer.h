// The optimiser over a net's flat weights: SGD (momentum, Nesterov, weight decay), Adam and
// AdamW, with its state kept in flat buffers that a checkpoint saves as they are.
#pragma once
#include <string>
#include <vector>

#include "train/net_config.h"

namespace convoy {

struct Optimizer {
  TrainRecipe recipe;
  OptimizerKind kind;
  std::vector<float> m, v;  // SGD uses m as its momentum buffer
  long long t = 0;          // updates done

  Optimizer(const TrainRecipe& r, size_t params);
  void step(std::vector<float>& weights, const std::vector<float>& grads, double lr);
};

// The learning rate of a run of `total` steps with `per_epoch` steps an epoch.
class LrSchedule {
 public:
  LrSchedule(const TrainRecipe& r, long long total, long long per_epoch);
  double at(long long step) const;  // step: 0-based over the run

 private:
  TrainRecipe r_;
  ScheduleKind kind_;
  long long total_, per_epoch_;
};

// The learning rate at `step` (0-based) of `total` steps with `per_epoch` steps an epoch.
double lr_at(const TrainRecipe& r, long long step, long long total, long long per_epoch);

}  // namespace convoy
