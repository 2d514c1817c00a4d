// Optimisers and lr schedules against their definitions (PyTorch's SGD with Nesterov momentum
// and weight decay, Adam, AdamW; step, cosine, one-cycle, warm-up).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "train/optimizer.h"

using namespace convoy;

TEST(Optimizer, SgdNesterovWithWeightDecay) {
  TrainRecipe r;
  r.optimizer = OptimizerKind::sgd;
  r.momentum = 0.9;
  r.nesterov = true;
  r.weight_decay = 0.1;
  Optimizer opt(r, 1);
  std::vector<float> w = {1.f}, g = {0.5f};
  double buf = 0, ww = 1;
  for (int i = 0; i < 3; ++i) {
    opt.step(w, g, 0.1);
    const double d = 0.5 + 0.1 * ww;
    buf = 0.9 * buf + d;
    ww -= 0.1 * (d + 0.9 * buf);
    EXPECT_NEAR(w[0], ww, 1e-6);
  }
}

TEST(Optimizer, AdamAndAdamW) {
  for (OptimizerKind kind : {OptimizerKind::adam, OptimizerKind::adamw}) {
    TrainRecipe r;
    r.optimizer = kind;
    r.weight_decay = 0.01;
    Optimizer opt(r, 1);
    std::vector<float> w = {2.f}, g = {0.3f};
    double m = 0, v = 0, ww = 2;
    for (int t = 1; t <= 3; ++t) {
      opt.step(w, g, 0.01);
      double d = 0.3;
      if (r.optimizer == OptimizerKind::adamw)
        ww -= 0.01 * 0.01 * ww;
      else
        d += 0.01 * ww;
      m = 0.9 * m + 0.1 * d;
      v = 0.999 * v + 0.001 * d * d;
      ww -= 0.01 * (m / (1 - std::pow(0.9, t))) / (std::sqrt(v / (1 - std::pow(0.999, t))) + 1e-8);
      EXPECT_NEAR(w[0], ww, 1e-5) << (kind == OptimizerKind::adamw ? "adamw" : "adam") << " step " << t;
    }
  }
}

TEST(Schedule, OneCycleStepCosineWarmup) {
  TrainRecipe r;
  r.lr = 0.05;
  r.schedule = ScheduleKind::onecycle;
  const long long total = 1000;
  EXPECT_NEAR(lr_at(r, 0, total, 100), 0.05 / 25, 1e-9);
  EXPECT_NEAR(lr_at(r, 299, total, 100), 0.05, 1e-4);
  EXPECT_NEAR(lr_at(r, total - 1, total, 100), 0.05 / 25 / 1e4, 1e-9);
  for (long long s = 1; s < 299; ++s) EXPECT_GT(lr_at(r, s, total, 100), lr_at(r, s - 1, total, 100));
  for (long long s = 300; s < total; ++s) EXPECT_LT(lr_at(r, s, total, 100), lr_at(r, s - 1, total, 100));

  r.schedule = ScheduleKind::step;
  r.lr = 0.1;
  r.step_epochs = 2;
  r.gamma = 0.1;
  EXPECT_NEAR(lr_at(r, 199, total, 100), 0.1, 1e-12);
  EXPECT_NEAR(lr_at(r, 200, total, 100), 0.01, 1e-12);
  EXPECT_NEAR(lr_at(r, 400, total, 100), 0.001, 1e-12);

  r.schedule = ScheduleKind::cosine;
  r.warmup_epochs = 1;
  r.min_lr = 0;
  EXPECT_NEAR(lr_at(r, 0, total, 100), 0.1 / 100, 1e-12);  // linear warm-up from lr/warm
  EXPECT_NEAR(lr_at(r, 99, total, 100), 0.1, 1e-12);
  EXPECT_NEAR(lr_at(r, 100, total, 100), 0.1, 1e-12);  // cosine starts at the peak
  EXPECT_NEAR(lr_at(r, 550, total, 100), 0.05, 1e-9);  // half way through the cosine
  EXPECT_NEAR(lr_at(r, 1000, total, 100), 0.0, 1e-9);
}
