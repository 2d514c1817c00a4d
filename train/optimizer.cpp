// Optimiser state and the lr schedules: constant, step, cosine (each with an optional linear
// warm-up) and one-cycle (PyTorch's OneCycleLR: cosine up from lr/div_factor over pct_start,
// then cosine down to lr/(div_factor*final_div_factor)).
#include "train/optimizer.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "shared/error.h"
#include "train/optimizer_update.h"

namespace convoy {

namespace {

// Whether the recipe's exclusions leave a node's weights (bias false) or biases out of the decay.
bool excluded(const Node& nd, bool bias, const TrainRecipe& r) {
  const bool norm = !r.weight_decay_norm && nd.op().is_norm();
  return norm || (bias && !r.weight_decay_bias);
}

}  // namespace

std::vector<uint32_t> no_decay_mask(const Net& net, const TrainRecipe& r) {
  if (r.weight_decay == 0 || (r.weight_decay_norm && r.weight_decay_bias)) return {};
  std::vector<uint32_t> mask((net.weights().size() + 31) / 32, 0u);
  auto exclude = [&](size_t off, size_t count) {
    for (size_t i = off; i < off + count; ++i) mask[i / 32] |= 1u << (i % 32);
  };
  for (const Node& nd : net.nodes()) {
    if (excluded(nd, false, r)) exclude(nd.w_off, nd.w_count);
    if (excluded(nd, true, r)) exclude(nd.b_off, nd.b_count);
  }
  return mask;
}

LarsPlan lars_plan(const Net& net, const TrainRecipe& r) {
  std::vector<LarsTensor> tensors;
  for (const Node& nd : net.nodes()) {
    if (nd.w_count) tensors.push_back({nd.w_off, nd.w_count, 0, 0, !excluded(nd, false, r)});
    if (nd.b_count) tensors.push_back({nd.b_off, nd.b_count, 0, 0, !excluded(nd, true, r)});
  }
  return plan_lars(tensors);
}

Optimizer::Optimizer(const TrainRecipe& r, size_t params) : recipe(r), kind(r.optimizer), m(params, 0.f) {
  if (kind == OptimizerKind::lars)
    fail("the LARS optimiser takes its rates per parameter tensor: build it from the net");
  if (kind != OptimizerKind::sgd) v.assign(params, 0.f);
}

Optimizer::Optimizer(const TrainRecipe& r, const Net& net)
    : recipe(r), kind(r.optimizer), m(net.weights().size(), 0.f) {
  if (kind == OptimizerKind::adam || kind == OptimizerKind::adamw) v.assign(m.size(), 0.f);
  if (kind == OptimizerKind::lars)
    lars = lars_plan(net, r);
  else
    no_decay = no_decay_mask(net, r);
}

void Optimizer::step(std::vector<float>& weights, const std::vector<float>& grads, double lr) {
  ++t;
  const uint32_t* skip = no_decay.empty() ? nullptr : no_decay.data();
  if (kind == OptimizerKind::lars) {
    if (lars.params() != weights.size())
      fail("the LARS optimiser was planned for " + std::to_string(lars.params()) + " parameters, not " +
           std::to_string(weights.size()));
    lars_update(lars, weights.data(), grads.data(), m.data(), float(lr), float(recipe.momentum), recipe.nesterov,
                float(recipe.weight_decay), float(recipe.lars_trust), float(recipe.lars_eps));
  } else if (kind == OptimizerKind::sgd) {
    sgd_update(weights.size(), weights.data(), grads.data(), m.data(), float(lr), float(recipe.momentum),
               recipe.nesterov, float(recipe.weight_decay), skip);
  } else {
    adam_update(weights.size(), weights.data(), grads.data(), m.data(), v.data(), float(lr), float(recipe.beta1),
                float(recipe.beta2), float(recipe.adam_eps), float(recipe.weight_decay), kind == OptimizerKind::adamw,
                t, skip);
  }
}

LrSchedule::LrSchedule(const TrainRecipe& r, long long total, long long per_epoch)
    : r_(r), kind_(r.schedule), total_(total), per_epoch_(per_epoch) {}

double LrSchedule::at(long long step) const {
  const double pi = 3.14159265358979323846;
  auto cos_anneal = [&](double from, double to, double frac) {
    return to + (from - to) * 0.5 * (1 + std::cos(pi * std::clamp(frac, 0.0, 1.0)));
  };
  if (kind_ == ScheduleKind::onecycle) {
    const double start = r_.lr / r_.div_factor, end = start / r_.final_div_factor;
    const double up = std::max(1.0, r_.pct_start * double(total_) - 1);
    const double s = double(step);
    if (s <= up) return cos_anneal(start, r_.lr, s / up);
    return cos_anneal(r_.lr, end, (s - up) / std::max(1.0, double(total_) - 1 - up));
  }
  const long long warm = (long long)std::llround(r_.warmup_epochs * double(per_epoch_));
  if (step < warm) return r_.lr * double(step + 1) / double(warm);
  if (kind_ == ScheduleKind::step)
    return r_.lr * std::pow(r_.gamma, double(step / (std::max(1LL, per_epoch_) * r_.step_epochs)));
  if (kind_ == ScheduleKind::cosine)
    return cos_anneal(r_.lr, r_.min_lr, double(step - warm) / double(std::max(1LL, total_ - warm)));
  return r_.lr;
}

double lr_at(const TrainRecipe& r, long long step, long long total, long long per_epoch) {
  return LrSchedule(r, total, per_epoch).at(step);
}

}  // namespace convoy
