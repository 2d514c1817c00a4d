// A few training steps of whole nets on the GPU against the CPU reference, from the same weights
// and data: the fmnist net (dropout included) and ResNet-18 (batch norm, residual adds) at a small
// input size. fp32 mode, errors as ||gpu - cpu|| / ||cpu||: per-step loss within 1e-4, gradients
// within 1e-3 and running statistics within 1e-4 when both start each step from the same weights
// (cuDNN and OpenBLAS sum in different orders, and a near-tie in a ReLU or max-pool can go either
// way), and weights within 1e-4 after steps run independently at a small learning rate.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>

#include "train/gpu_net.h"
#include "train/layers/optimizer_update.h"
#include "train/net_config.h"
#include "rel_l2.h"

using namespace convoy;

namespace {


gpu::DeviceBuffer<uint64_t> step_key(uint64_t key) {
  gpu::DeviceBuffer<uint64_t> b(1);
  b.upload(&key, 1);
  return b;
}

void steps_match(const std::string& config, Dims input, int n, int steps) {
  NetConfig cfg = read_net_config(std::string(CONVOY_SOURCE_DIR) + "/configs/" + config);
  Net cpu(cfg, input, 10);
  cpu.init_weights(7);
  cpu.reserve(n);
  gpu::Context ctx(0);
  gpu::GpuNet g(ctx, cpu, n);
  g.upload(cpu.weights(), cpu.state());

  std::mt19937 rng(3);
  std::normal_distribution<float> d;
  std::vector<float> x(size_t(n) * input.size());
  std::vector<int32_t> labels(n);
  std::vector<uint64_t> keys(n);
  for (auto& v : x) v = d(rng);
  for (int i = 0; i < n; ++i) labels[i] = int32_t(rng() % 10), keys[i] = rng();
  gpu::DeviceBuffer<float> gx(x.size());
  gpu::DeviceBuffer<int32_t> glabels(n);
  gpu::DeviceBuffer<uint64_t> gkeys(n);
  gx.upload(x.data(), x.size());
  glabels.upload(labels.data(), n);
  gkeys.upload(keys.data(), n);

  const size_t params = cpu.weights().size();
  auto gpu_losses = [&] {
    std::vector<float> l(n);
    ctx.synchronize();
    CONVOY_CUDA_CHECK(cudaMemcpy(l.data(), g.losses(), n * sizeof(float), cudaMemcpyDeviceToHost));
    return std::accumulate(l.begin(), l.end(), 0.0) / n;
  };

  // Lockstep: both start every step from the CPU's weights, so errors do not compound.
  std::vector<float> mom(params, 0.f);
  for (int step = 0; step < steps; ++step) {
    g.upload(cpu.weights(), cpu.state());
    const double loss = cpu.forward(n, x.data(), labels.data(), true, uint64_t(step), keys.data());
    cpu.backward();
    auto key = step_key(uint64_t(step));
    g.forward(n, gx.get(), glabels.get(), true, key.get(), gkeys.get());
    g.backward();
    EXPECT_NEAR(gpu_losses(), loss, 1e-4 * std::max(1.0, std::fabs(loss))) << config << " step " << step;
    std::vector<float> ggrads(params), w, state;
    CONVOY_CUDA_CHECK(cudaMemcpy(ggrads.data(), g.grads(), params * sizeof(float), cudaMemcpyDeviceToHost));
    EXPECT_LT(test::rel_l2(ggrads, cpu.grads()), 1e-3) << config << " gradients at step " << step;
    g.download(w, state);
    if (!state.empty()) EXPECT_LT(test::rel_l2(state, cpu.state()), 1e-4) << config << " running statistics";
    sgd_update(params, cpu.weights().data(), cpu.grads().data(), mom.data(), 0.01f, 0.9f, true, 5e-4f);
  }

  // Independent: the GPU keeps its own weights and momentum through the steps.
  g.upload(cpu.weights(), cpu.state());
  std::fill(mom.begin(), mom.end(), 0.f);
  gpu::DeviceBuffer<float> gmom(params);
  CONVOY_CUDA_CHECK(cudaMemset(gmom.get(), 0, params * sizeof(float)));
  for (int step = 0; step < steps; ++step) {
    cpu.forward(n, x.data(), labels.data(), true, uint64_t(100 + step), keys.data());
    cpu.backward();
    sgd_update(params, cpu.weights().data(), cpu.grads().data(), mom.data(), 1e-3f, 0.9f, true, 5e-4f);
    auto key = step_key(uint64_t(100 + step));
    g.forward(n, gx.get(), glabels.get(), true, key.get(), gkeys.get());
    g.backward();
    auto sc = gpu::DeviceBuffer<gpu::StepScalars>(1);
    const gpu::StepScalars h = gpu::step_scalars(0, 1e-3, 0.9, 0.999, step + 1);
    sc.upload(&h, 1);
    gpu::sgd_update(ctx, params, g.weights(), g.grads(), gmom.get(), sc.get(), 0.9f, true, 5e-4f);
  }
  std::vector<float> w, state;
  g.download(w, state);
  EXPECT_LT(test::rel_l2(w, cpu.weights()), 1e-4) << config << " weights after " << steps << " independent steps";
}

}  // namespace

TEST(GpuNet, FmnistStepsMatchCpu) { steps_match("fmnist.toml", {1, 28, 28}, 32, 5); }

TEST(GpuNet, Resnet18StepsMatchCpu) { steps_match("resnet18.toml", {3, 32, 32}, 4, 3); }
