// The optimiser over a net's flat weights: SGD (momentum, Nesterov, weight decay), Adam, AdamW and
// LARS, with its state kept in flat buffers that a checkpoint saves as they are.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "train/lars_plan.h"
#include "train/net.h"
#include "train/net_config.h"

namespace convoy {

// The parameters that take no weight decay under the recipe's weight_decay_norm = false (batch
// norm's gamma and beta) and weight_decay_bias = false (every bias, beta included): a bit per
// element of the flat parameter buffer, element i at bit i % 32 of word i / 32. Empty where every
// parameter decays (the keys at their defaults, or no weight decay at all).
std::vector<uint32_t> no_decay_mask(const Net& net, const TrainRecipe& r);

// LARS's plan of the net's parameter tensors: each layer's weights and its biases, adapted (trust
// ratio and weight decay) unless the recipe's exclusions above leave them out, whatever the decay.
LarsPlan lars_plan(const Net& net, const TrainRecipe& r);

struct Optimizer {
  TrainRecipe recipe;
  OptimizerKind kind;
  std::vector<float> m, v;         // SGD and LARS use m as their momentum buffer
  long long t = 0;                 // updates done
  std::vector<uint32_t> no_decay;  // no_decay_mask (empty: every parameter decays; always under LARS)
  LarsPlan lars;                   // lars_plan under LARS, else empty

  // Over a flat buffer of `params` values with no tensors known: every optimiser but LARS, which
  // fails here (its rates are per tensor).
  Optimizer(const TrainRecipe& r, size_t params);
  // For the net's parameters, with the recipe's weight decay exclusions (and LARS's tensors).
  Optimizer(const TrainRecipe& r, const Net& net);
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
