// Optimiser state and the lr schedules: constant, step, cosine (each with an optional linear
// warm-up) and one-cycle (PyTorch's OneCycleLR: cosine up from lr/div_factor over pct_start,
// then cosine down to lr/(div_factor*final_div_factor)).
#include "train/optimizer.h"

#include <algorithm>
#include <cmath>

#include "train/layers/optimizer_update.h"

namespace convoy {

Optimizer::Optimizer(const TrainRecipe& r, size_t params) : recipe(r), m(params, 0.f) {
  if (r.optimizer != "sgd") v.assign(params, 0.f);
}

void Optimizer::step(std::vector<float>& weights, const std::vector<float>& grads, double lr) {
  ++t;
  if (recipe.optimizer == "sgd")
    sgd_update(weights.size(), weights.data(), grads.data(), m.data(), float(lr),
               float(recipe.momentum), recipe.nesterov, float(recipe.weight_decay));
  else
    adam_update(weights.size(), weights.data(), grads.data(), m.data(), v.data(), float(lr),
                float(recipe.beta1), float(recipe.beta2), float(recipe.adam_eps),
                float(recipe.weight_decay), recipe.optimizer == "adamw", t);
}

double lr_at(const TrainRecipe& r, long long step, long long total, long long per_epoch) {
  const double pi = 3.14159265358979323846;
  auto cos_anneal = [&](double from, double to, double frac) {
    return to + (from - to) * 0.5 * (1 + std::cos(pi * std::clamp(frac, 0.0, 1.0)));
  };
  if (r.schedule == "onecycle") {
    const double start = r.lr / r.div_factor, end = start / r.final_div_factor;
    const double up = std::max(1.0, r.pct_start * double(total) - 1);
    const double s = double(step);
    if (s <= up) return cos_anneal(start, r.lr, s / up);
    return cos_anneal(r.lr, end, (s - up) / std::max(1.0, double(total) - 1 - up));
  }
  const long long warm = (long long)std::llround(r.warmup_epochs * double(per_epoch));
  if (step < warm) return r.lr * double(step + 1) / double(warm);
  if (r.schedule == "step")
    return r.lr * std::pow(r.gamma, double(step / (std::max(1LL, per_epoch) * r.step_epochs)));
  if (r.schedule == "cosine")
    return cos_anneal(r.lr, r.min_lr, double(step - warm) / double(std::max(1LL, total - warm)));
  return r.lr;
}

}  // namespace convoy
