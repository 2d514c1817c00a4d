// GpuStep, the CUDA backend's whole training step (raw uint8 batch -> GPU augmentation -> net ->
// update, graph-captured): the graph replays exactly what the op-by-op step does, and a few steps
// follow the CPU trainer's arithmetic (fp32 mode, weights within 1e-4 relative L2 error).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "train/gpu_step.h"
#include "train/net_config.h"
#include "rel_l2.h"

using namespace convoy;

namespace {

struct Batches {
  NetConfig cfg = read_net_config(std::string(CONVOY_SOURCE_DIR) + "/configs/fmnist.toml");
  ImageShape stored{28, 28, 1};
  Augmenter aug{stored, 0, 2, true, {72.9}, {90.0}};
  Net net{cfg, Dims{1, 28, 28}, 10};
  std::vector<HostBatch> batches;

  explicit Batches(int n, int count) {
    net.init_weights(11);
    std::mt19937 rng(4);
    for (int b = 0; b < count; ++b) {
      HostBatch hb;
      hb.n = n;
      hb.pixels.resize(size_t(n) * stored.bytes());
      for (auto& p : hb.pixels) p = uint8_t(rng() % 256);
      for (int i = 0; i < n; ++i) {
        const CropFlip cf = aug.choose(true, 77 + b, i);
        hb.crops.insert(hb.crops.end(), {cf.top, cf.left, int32_t(cf.flip)});
        hb.labels.push_back(int32_t(rng() % 10));
        hb.keys.push_back(uint64_t(1000 * b + i));
      }
      batches.push_back(std::move(hb));
    }
  }
};


}  // namespace

TEST(GpuStep, GraphReplaysTheOpByOpStep) {
  Batches s(64, 7);
  std::vector<float> weights[2];
  gpu::StepMetrics metrics[2];
  for (int graph = 0; graph < 2; ++graph) {
    Net net = s.net;
    Optimizer opt(s.cfg.train, net.weights().size());
    gpu::GpuStepOptions o;
    o.math = gpu::MathMode::fp32;
    o.graph = graph == 1;
    gpu::GpuStep step(0, net, opt, s.aug, 64, 0, 1, o);
    for (size_t k = 0; k < s.batches.size(); ++k) step.train(s.batches[k], 500 + k, 0.01);
    EXPECT_EQ(step.graphed(), graph == 1);
    metrics[graph] = step.take_metrics();
    step.sync_to(net, opt);
    weights[graph] = net.weights();
    EXPECT_EQ(opt.t, long(s.batches.size()));
  }
  EXPECT_EQ(weights[0], weights[1]);  // deterministic algorithms: bit for bit
  EXPECT_EQ(metrics[0].loss_sum, metrics[1].loss_sum);
  EXPECT_EQ(metrics[0].hits, metrics[1].hits);
  EXPECT_EQ(metrics[1].samples, 64.0 * s.batches.size());
}

TEST(GpuStep, FollowsTheCpuTrainer) {
  Batches s(32, 5);
  Net cpu = s.net;
  Optimizer cpu_opt(s.cfg.train, cpu.weights().size());
  cpu.reserve(32);
  double cpu_loss = 0;
  const size_t per = s.stored.bytes();
  for (size_t k = 0; k < s.batches.size(); ++k) {
    const HostBatch& b = s.batches[k];
    std::vector<float> x(size_t(b.n) * per);
    for (int i = 0; i < b.n; ++i) {
      const CropFlip cf{b.crops[3 * i], b.crops[3 * i + 1], b.crops[3 * i + 2] != 0};
      s.aug.apply(b.pixels.data() + i * per, cf, x.data() + i * per);
    }
    cpu_loss += b.n * cpu.forward(b.n, x.data(), b.labels.data(), true, 500 + k, b.keys.data());
    cpu.backward();
    cpu_opt.step(cpu.weights(), cpu.grads(), 1e-3);
  }
  Net net = s.net;
  Optimizer opt(s.cfg.train, net.weights().size());
  gpu::GpuStepOptions o;
  o.math = gpu::MathMode::fp32;
  gpu::GpuStep step(0, net, opt, s.aug, 32, 0, 1, o);
  for (size_t k = 0; k < s.batches.size(); ++k) step.train(s.batches[k], 500 + k, 1e-3);
  const gpu::StepMetrics m = step.take_metrics();
  step.sync_to(net, opt);
  EXPECT_NEAR(m.loss_sum, cpu_loss, 1e-4 * cpu_loss);
  EXPECT_LT(test::rel_l2(net.weights(), cpu.weights()), 1e-4);
  EXPECT_LT(test::rel_l2(opt.m, cpu_opt.m), 1e-3);
}
