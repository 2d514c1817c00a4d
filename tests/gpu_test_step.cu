// GpuStep, the CUDA backend's whole training step (raw uint8 batch -> GPU augmentation -> net ->
// update, graph-captured): the graph replays exactly what the op-by-op step does (fp32 and bf16),
// and a few steps follow the CPU trainer's arithmetic: fp32 mode, weights within 1e-4 relative L2
// error; bf16 mode, within the bounds a CPU run that rounds every activation and gradient to bf16
// stays within against the fp32 one, with a margin (see FollowsTheCpuTrainerBf16). A NaN loss
// skips the step on the device and reaches the host two steps later. With [train] accumulate the
// micro-batches follow the CPU step's, end where the whole batch does, and a non-finite loss in any
// of them skips the whole step. With [data] progressive's batches of several sizes, the step follows
// the CPU's across the size changes, and each size's graphs replay the op-by-op step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "rel_l2.h"
#include "step_batches.h"
#include "train/cpu_step.h"
#include "train/evaluation.h"
#include "train/gpu_step.h"
#include "train/optimizer.h"
#include "train/weight_average.h"

using namespace convoy;
using convoy::test::Batches;

namespace {

// A one-rank step's options: its math, and captured graphs or op by op.
gpu::GpuStepOptions step_options(gpu::MathMode math, bool graph) {
  gpu::GpuStepOptions o;
  o.math = math;
  o.graph = graph;
  return o;
}

void graph_replays(gpu::MathMode math, int n, const std::string& config = "fmnist.toml",
                   ImageShape shape = {28, 28, 1}) {
  Batches s(n, 7, config, shape);
  std::vector<float> weights[2];
  gpu::StepMetrics metrics[2];
  for (int graph = 0; graph < 2; ++graph) {
    Net net = s.net;
    Optimizer opt(s.cfg.train, net.weights().size());
    gpu::GpuStep step(0, net, opt, s.aug.format(), n, 0, 1, step_options(math, graph == 1));
    for (size_t k = 0; k < s.batches.size(); ++k) step.train(s.batches[k], 500 + k, 0.01);
    EXPECT_EQ(step.graphed(), graph == 1);
    metrics[graph] = step.take_metrics();
    step.sync_to(net, opt);
    weights[graph] = net.weights();
    EXPECT_EQ(opt.t, long(s.batches.size()));
  }
  EXPECT_EQ(weights[0], weights[1]) << config;  // deterministic algorithms: bit for bit
  EXPECT_EQ(metrics[0].loss_sum, metrics[1].loss_sum);
  EXPECT_EQ(metrics[0].hits, metrics[1].hits);
  EXPECT_EQ(metrics[1].samples, double(n) * s.batches.size());
}

// The CPU trainer's steps and the GPU's on the same raw batches: the loss summed over the steps,
// the weights and the momentum at the end, as relative errors.
struct TrainerBounds {
  double loss, weights, momentum;
};

void follows_the_cpu_trainer(gpu::MathMode math, const TrainerBounds& bound) {
  Batches s(32, 5);
  Net cpu = s.net;
  Optimizer cpu_opt(s.cfg.train, cpu.weights().size());
  cpu.reserve(32);
  double cpu_loss = 0;
  const size_t per = s.aug.out_bytes();
  for (size_t k = 0; k < s.batches.size(); ++k) {
    const HostBatch& b = s.batches[k];
    std::vector<float> x(size_t(b.n) * per);
    for (int i = 0; i < b.n; ++i) s.aug.normalize(b.pixels.data() + i * per, b.flips[i], x.data() + i * per);
    cpu_loss += b.n * cpu.forward(b.n, x.data(), b.labels.data(), true, 500 + k, b.keys.data());
    cpu.backward();
    cpu_opt.step(cpu.weights(), cpu.grads(), 1e-3);
  }
  Net net = s.net;
  Optimizer opt(s.cfg.train, net.weights().size());
  gpu::GpuStepOptions o;
  o.math = math;
  gpu::GpuStep step(0, net, opt, s.aug.format(), 32, 0, 1, o);
  for (size_t k = 0; k < s.batches.size(); ++k) step.train(s.batches[k], 500 + k, 1e-3);
  const gpu::StepMetrics m = step.take_metrics();
  step.sync_to(net, opt);
  EXPECT_NEAR(m.loss_sum, cpu_loss, bound.loss * cpu_loss);
  EXPECT_LT(test::rel_l2(net.weights(), cpu.weights()), bound.weights);
  EXPECT_LT(test::rel_l2(opt.m, cpu_opt.m), bound.momentum);
}

// The net of `cfg` for the batches, its weights seeded as Batches seeds its own.
Net net_of(const Batches& s, const NetConfig& cfg) {
  Net net(cfg, s.net.input_dims(), 10);
  net.init_weights(11);
  return net;
}

// The CPU trainer's run of cfg's net and recipe over the batches: the loss summed over the samples,
// the weights.
struct CpuRun {
  double loss = 0;
  std::vector<float> weights, m;
};

CpuRun cpu_run(const Batches& s, const NetConfig& cfg, double lr) {
  Net cpu = net_of(s, cfg);
  Optimizer opt(cfg.train, cpu);
  cpu.reserve(s.batches[0].n);
  CpuRun r;
  const size_t per = s.aug.out_bytes();
  for (size_t k = 0; k < s.batches.size(); ++k) {
    const HostBatch& b = s.batches[k];
    std::vector<float> x(size_t(b.n) * per);
    for (int i = 0; i < b.n; ++i) s.aug.normalize(b.pixels.data() + i * per, b.flips[i], x.data() + i * per);
    r.loss += b.n * cpu.forward(b.n, x.data(), b.labels.data(), true, 500 + k, b.keys.data());
    cpu.backward();
    opt.step(cpu.weights(), cpu.grads(), lr);
  }
  r.weights = cpu.weights();
  r.m = opt.m;
  return r;
}

// The parameters under the mask.
std::vector<float> masked(const std::vector<float>& w, const std::vector<uint32_t>& mask) {
  std::vector<float> out;
  for (size_t i = 0; i < w.size(); ++i)
    if (mask[i / 32] >> (i % 32) & 1u) out.push_back(w[i]);
  return out;
}

// The references' recipe keys on both backends: ResNet-18 with label smoothing, its residual
// blocks' last batch norms starting at gamma 0 and no weight decay on batch norm parameters and
// biases, trained a few steps from the same weights, at a weight decay high enough that decaying
// the excluded parameters moves them well beyond the bound (CPU runs without the smoothing and
// without the exclusions show how far), must follow the CPU: the loss sum, all weights, and the
// excluded parameters alone.
void recipe_keys_follow_the_cpu_trainer() {
  Batches s(8, 4, "resnet18.toml", {32, 32, 3});
  NetConfig cfg = s.cfg;
  cfg.zero_init_residual = true;
  cfg.train.label_smoothing = 0.1;
  cfg.train.weight_decay = 0.5;
  cfg.train.weight_decay_norm = false;
  cfg.train.weight_decay_bias = false;
  const Net start = net_of(s, cfg);
  ASSERT_EQ(start.residual_norms().size(), 8u);
  const std::vector<uint32_t> mask = no_decay_mask(start, cfg.train);
  const double lr = 0.01;
  const CpuRun cpu = cpu_run(s, cfg, lr);
  NetConfig unsmoothed = cfg, decayed = cfg;
  unsmoothed.train.label_smoothing = 0;
  decayed.train.weight_decay_norm = decayed.train.weight_decay_bias = true;
  ASSERT_GT(std::fabs(cpu_run(s, unsmoothed, lr).loss - cpu.loss), 1e-3 * cpu.loss);
  ASSERT_GT(test::rel_l2(masked(cpu_run(s, decayed, lr).weights, mask), masked(cpu.weights, mask)), 1e-2);

  Net net = start;
  Optimizer opt(cfg.train, net);
  gpu::GpuStepOptions o;
  o.math = gpu::MathMode::fp32;
  gpu::GpuStep step(0, net, opt, s.aug.format(), 8, 0, 1, o);
  for (size_t k = 0; k < s.batches.size(); ++k) step.train(s.batches[k], 500 + k, lr);
  const gpu::StepMetrics m = step.take_metrics();
  step.sync_to(net, opt);
  EXPECT_NEAR(m.loss_sum, cpu.loss, 1e-4 * cpu.loss);
  EXPECT_LT(test::rel_l2(net.weights(), cpu.weights), 1e-3);
  EXPECT_LT(test::rel_l2(masked(net.weights(), mask), masked(cpu.weights, mask)), 1e-3);
}

// [train] optimizer = "lars" on both backends: ResNet-18 trained a few steps from the same weights
// (the second step on, in the captured graph), at a rate where LARS moves the weights far otherwise
// than momentum SGD at the same lr (a CPU run shows how far), must follow the CPU: the loss sum, all
// weights, how far they moved, the momentum, and the skip list's parameters (batch norm's, the
// biases) alone. The residual blocks start at zero: from the plain start, weights perturbed by 1e-6
// move a CPU run's weights by 1.2e-2 and its momentum by 0.59 within these four steps (the GPU's
// fp32 rounding did the like), against 1e-6 and 8e-6 from the zero start.
void lars_follows_the_cpu_trainer() {
  Batches s(8, 4, "resnet18.toml", {32, 32, 3});
  NetConfig cfg = s.cfg;
  cfg.zero_init_residual = true;
  cfg.train.optimizer = OptimizerKind::lars;
  cfg.train.weight_decay_norm = cfg.train.weight_decay_bias = false;
  cfg.train.nesterov = false;
  cfg.train.weight_decay = 5e-5;
  cfg.train.lars_trust = 0.02;
  const Net start = net_of(s, cfg);
  const std::vector<float> w0 = net_of(s, cfg).weights();
  const std::vector<uint32_t> skipped = no_decay_mask(start, cfg.train);
  auto moved = [&](const std::vector<float>& w) {
    std::vector<float> d(w.size());
    for (size_t i = 0; i < w.size(); ++i) d[i] = w[i] - w0[i];
    return d;
  };
  const double lr = 0.1;
  const CpuRun cpu = cpu_run(s, cfg, lr);
  NetConfig sgd = cfg;
  sgd.train.optimizer = OptimizerKind::sgd;
  ASSERT_GT(test::rel_l2(moved(cpu_run(s, sgd, lr).weights), moved(cpu.weights)), 0.1);

  Net net = start;
  Optimizer opt(cfg.train, net);
  gpu::GpuStepOptions o;
  o.math = gpu::MathMode::fp32;
  gpu::GpuStep step(0, net, opt, s.aug.format(), 8, 0, 1, o);
  for (size_t k = 0; k < s.batches.size(); ++k) step.train(s.batches[k], 500 + k, lr);
  const gpu::StepMetrics m = step.take_metrics();
  EXPECT_TRUE(step.graphed());
  step.sync_to(net, opt);
  EXPECT_EQ(opt.t, long(s.batches.size()));
  EXPECT_NEAR(m.loss_sum, cpu.loss, 1e-4 * cpu.loss);
  EXPECT_LT(test::rel_l2(net.weights(), cpu.weights), 1e-3);
  // How far the weights moved, and the momentum (the sum of the lr-scaled steps), are as accurate as
  // the gradients: 1e-2 (the fp32 step's gradients agree to about 1e-3, FollowsTheCpuTrainer).
  EXPECT_LT(test::rel_l2(moved(net.weights()), moved(cpu.weights)), 1e-2);
  EXPECT_LT(test::rel_l2(opt.m, cpu.m), 1e-2);
  EXPECT_LT(test::rel_l2(masked(net.weights(), skipped), masked(cpu.weights, skipped)), 1e-3);
}

// The CUDA step's evaluation pass as a Forward, as the backend's factory wraps it.
class GpuForward final : public Forward {
 public:
  explicit GpuForward(gpu::GpuStep& step) : step_(step) {}
  void evaluate(const HostBatch& b) override { step_.evaluate(b); }
  const float* losses() const override { return step_.losses(); }
  const float* probs() const override { return step_.probs(); }

 private:
  gpu::GpuStep& step_;
};

// A raw batch as the CPU backend takes it: normalised floats, mirrored where flips says.
HostBatch floats_of(const Batches& s, const HostBatch& b) {
  HostBatch f;
  f.n = b.n;
  f.labels = b.labels;
  f.keys = b.keys;
  const size_t per = s.aug.out_bytes();
  f.x.resize(size_t(b.n) * per);
  for (int i = 0; i < b.n; ++i) s.aug.normalize(b.pixels.data() + i * per, b.flips[i], f.x.data() + i * per);
  return f;
}

// [train] ema and eval_flip on both backends: ResNet-18 trained a few steps from the same weights
// with a moving average of decay 0.9; the average's weights and running statistics (far from the
// trained ones, so that a GPU that evaluated or saved the trained weights fails) follow the CPU.
// Then the evaluation of the average with the test-time flip (far from the unflipped one), by a
// GPU step holding the CPU's trained net and average, follows the CPU's: the same weights, so the
// bound is fp32's. (The residual blocks start at zero as in the recipe test: with batches of 8 at
// 32 px the plain start amplifies cuDNN's rounding to 3e-3 in the weights within four steps; at
// lr 0.05 the average then stays about 2e-2 from the trained weights, 1e-2 at 0.03.)
void average_and_flip_follow_the_cpu_trainer() {
  Batches s(8, 4, "resnet18.toml", {32, 32, 3});
  NetConfig cfg = s.cfg;
  cfg.train.ema = 0.9;
  cfg.zero_init_residual = true;
  const double lr = 0.05;
  Net cpu = net_of(s, cfg);
  cpu.reserve(8);
  Optimizer cpu_opt(cfg.train, cpu);
  WeightAverage cpu_avg(cfg.train.ema, cpu);
  CpuStep cpu_step(cpu, cpu_opt, 1, false, &cpu_avg);
  for (size_t k = 0; k < s.batches.size(); ++k) {
    EpochSums sums;
    cpu_step.train(floats_of(s, s.batches[k]), 500 + k, lr, sums);
  }
  ASSERT_GT(test::rel_l2(cpu_avg.weights, cpu.weights()), 1e-2);
  ASSERT_GT(test::rel_l2(cpu_avg.state, cpu.state()), 1e-2);

  Net net = net_of(s, cfg);
  Optimizer opt(cfg.train, net);
  WeightAverage avg(cfg.train.ema, net);
  gpu::GpuStepOptions o;
  o.math = gpu::MathMode::fp32;
  gpu::GpuStep step(0, net, opt, s.aug.format(), 8, 0, 1, o, &avg);
  for (size_t k = 0; k < s.batches.size(); ++k) step.train(s.batches[k], 500 + k, lr);
  step.sync_to(net, opt, &avg);
  EXPECT_LT(test::rel_l2(net.weights(), cpu.weights()), 1e-3);
  EXPECT_LT(test::rel_l2(avg.weights, cpu_avg.weights), 1e-3);
  EXPECT_LT(test::rel_l2(avg.state, cpu_avg.state), 1e-3);

  gpu::GpuStep judge(0, cpu, cpu_opt, s.aug.format(), 8, 0, 1, o, &cpu_avg);
  cpu_step.swap_average();
  judge.swap_average();
  const int width = s.aug.format().width;
  const HostBatch& b = s.batches[0];
  GpuForward gpu_forward(judge);
  const FlippedScores on_gpu = flipped_scores(gpu_forward, b, cpu.classes(), width);
  const FlippedScores on_cpu = flipped_scores(cpu_step, floats_of(s, b), cpu.classes(), width);
  cpu_step.evaluate(floats_of(s, b));
  const std::vector<float> unflipped(cpu.probs(), cpu.probs() + on_cpu.probs.size());
  ASSERT_GT(test::rel_l2(on_cpu.probs, unflipped), 1e-3);
  EXPECT_LT(test::rel_l2(on_gpu.probs, on_cpu.probs), 1e-4);
  EXPECT_LT(test::rel_l2(on_gpu.losses, on_cpu.losses), 1e-4);
  // Swapped back, the GPU evaluates the trained weights again.
  judge.swap_average();
  cpu_step.swap_average();
  const FlippedScores trained = flipped_scores(gpu_forward, b, cpu.classes(), width);
  EXPECT_LT(test::rel_l2(trained.probs, flipped_scores(cpu_step, floats_of(s, b), cpu.classes(), width).probs), 1e-4);
}

// A run's end on either backend: weights, running statistics, momentum, the figures summed over
// its steps and the first step whose loss was not finite (-1: none).
struct StepRun {
  std::vector<float> weights, state, m;
  EpochSums sums;
  long long nonfinite = -1;
};

// The CPU step over the batches (normalised as the GPU does), each as `accumulate` micro-batches.
StepRun cpu_step_run(const Batches& s, const Net& start, const std::vector<HostBatch>& data, int accumulate,
                     double lr) {
  Net cpu = start;
  Optimizer opt(cpu.config().train, cpu);
  CpuStep step(cpu, opt, 1, false, nullptr, accumulate);
  StepRun r;
  for (size_t k = 0; k < data.size(); ++k) step.train(floats_of(s, data[k]), 500 + k, lr, r.sums);
  r.weights = cpu.weights();
  r.state = cpu.state();
  r.m = opt.m;
  r.nonfinite = step.first_nonfinite().step;
  return r;
}

// The GPU step (fp32 math) over the raw batches, built for micro-batches of batch / accumulate.
StepRun gpu_step_run(const Batches& s, const Net& start, const std::vector<HostBatch>& data, int accumulate, double lr,
                     bool graph = true) {
  Net net = start;
  Optimizer opt(net.config().train, net);
  gpu::GpuStepOptions o;
  o.math = gpu::MathMode::fp32;
  o.graph = graph;
  o.accumulate = accumulate;
  gpu::GpuStep step(0, net, opt, s.aug.format(), data[0].n / accumulate, 0, 1, o);
  for (size_t k = 0; k < data.size(); ++k) step.train(data[k], 500 + k, lr);
  EXPECT_EQ(step.graphed(), graph && data.size() > 1);  // the first step runs op by op
  const gpu::StepMetrics m = step.take_metrics();
  step.sync_to(net, opt);
  EXPECT_EQ(opt.t, long(data.size()));
  StepRun r;
  r.sums = {m.loss_sum, m.hits, m.samples, m.skipped};
  r.weights = net.weights();
  r.state = net.state();
  r.m = opt.m;
  r.nonfinite = step.first_nonfinite().step;
  return r;
}

// [train] accumulate on both backends: ResNet-18 trained 4 steps of 12 as 3 micro-batches of 4, batch
// norm normalising each micro-batch by its own statistics on both, follows the CPU step with the same
// accumulation (loss sum, weights, running statistics) within the bounds of the recipe keys' twin;
// the unaccumulated CPU run ends far beyond them. The
// graphs of the micro-batches (one before the last, one with the update) replay the op-by-op step
// bit for bit. The residual blocks start at zero: from the plain start, batch norm over 4 samples
// makes weights perturbed by 1e-6 move a CPU run's weights by 7.7e-2 and its statistics by 0.29 (the
// GPU's fp32 rounding did the like), against 2e-5 and 1e-6 from the zero start (unaccumulated: 0.45).
void accumulation_follows_the_cpu_trainer() {
  Batches s(12, 4, "resnet18.toml", {32, 32, 3});
  NetConfig cfg = s.cfg;
  cfg.zero_init_residual = true;
  const Net start = net_of(s, cfg);
  const double lr = 0.01;
  const StepRun cpu = cpu_step_run(s, start, s.batches, 3, lr);
  ASSERT_GT(test::rel_l2(cpu_step_run(s, start, s.batches, 1, lr).state, cpu.state), 1e-1);
  const StepRun gpu = gpu_step_run(s, start, s.batches, 3, lr),
                op_by_op = gpu_step_run(s, start, s.batches, 3, lr, false);
  EXPECT_EQ(gpu.weights, op_by_op.weights);
  EXPECT_EQ(gpu.state, op_by_op.state);
  EXPECT_EQ(gpu.sums.loss, op_by_op.sums.loss);
  EXPECT_EQ(gpu.sums.samples, 48.0);
  EXPECT_EQ(gpu.nonfinite, -1);
  EXPECT_NEAR(gpu.sums.loss, cpu.sums.loss, 1e-4 * cpu.sums.loss);
  EXPECT_LT(test::rel_l2(gpu.weights, cpu.weights), 1e-3);
  EXPECT_LT(test::rel_l2(gpu.state, cpu.state), 1e-3);
}

// The fmnist net (no batch norm; dropout drawn by sample): 5 steps of 32 as 2 micro-batches of 16
// on the GPU end where its steps of the whole 32 do, to float rounding (CPU: weights 1e-8, momentum
// 2.3e-7 apart), far closer than the halves trained as steps of their own come (CPU: weights 1.6e-2,
// momentum 0.73).
void accumulated_steps_follow_the_whole_batch() {
  Batches s(32, 5);
  const double lr = 1e-3;
  const StepRun whole = gpu_step_run(s, s.net, s.batches, 1, lr), acc = gpu_step_run(s, s.net, s.batches, 2, lr);
  EXPECT_LT(test::rel_l2(acc.weights, whole.weights), 1e-5);
  EXPECT_LT(test::rel_l2(acc.m, whole.m), 1e-4);
  EXPECT_NEAR(acc.sums.loss, whole.sums.loss, 1e-5 * whole.sums.loss);
  EXPECT_EQ(acc.sums.samples, whole.sums.samples);
  std::vector<HostBatch> halves;
  const size_t per = s.aug.out_bytes();
  for (const HostBatch& b : s.batches)
    for (int h = 0; h < 2; ++h) {
      HostBatch x;
      x.n = 16;
      x.pixels.assign(b.pixels.begin() + long(h * 16 * per), b.pixels.begin() + long((h + 1) * 16 * per));
      x.flips.assign(b.flips.begin() + h * 16, b.flips.begin() + (h + 1) * 16);
      x.labels.assign(b.labels.begin() + h * 16, b.labels.begin() + (h + 1) * 16);
      x.keys.assign(b.keys.begin() + h * 16, b.keys.begin() + (h + 1) * 16);
      halves.push_back(std::move(x));
    }
  const StepRun steps = gpu_step_run(s, s.net, halves, 1, lr);
  EXPECT_GT(test::rel_l2(steps.weights, whole.weights), 1e-3);
  EXPECT_GT(test::rel_l2(steps.m, whole.m), 1e-1);
}

// One fc layer whose weight from pixel 0 to class 0 is 3e38: a sample whose pixel 0 is 0 (normalised
// -0.81) keeps a finite loss (the labels are never class 0), one whose pixel 0 is 255 (2.02) makes
// its logit overflow and its loss not finite. Steps of 8 as 2 micro-batches of 4, the middle one's
// first or last micro-batch poisoned: either way the whole step is skipped on the device (the
// verdict of a micro-batch before the last carried to it) and the gradients summed for it are
// dropped, so both runs, and a run that never saw the step, end bit for bit alike, as on the CPU.
void a_nonfinite_micro_batch_skips_the_whole_step() {
  Batches s(8, 3);
  const NetConfig cfg = parse_net_config(
      "[train]\nweight_decay = 0\n[[layer]]\ntype = \"flatten\"\n[[layer]]\ntype = \"fc\"\nunits = \"classes\"\n"
      "[[layer]]\ntype = \"softmax_xent\"\n",
      "fc.toml");
  Net start = net_of(s, cfg);
  start.weights()[start.blocks().at(0).offset] = 3e38f;  // fc weight [class 0][pixel 0]
  const size_t per = s.aug.out_bytes();
  std::vector<HostBatch> data = s.batches;
  for (HostBatch& b : data)
    for (int i = 0; i < b.n; ++i) {
      b.pixels[size_t(i) * per] = 0;
      b.flips[size_t(i)] = 0;  // pixel 0 stays where it is
      b.labels[size_t(i)] = 1 + b.labels[size_t(i)] % 9;
    }
  std::vector<HostBatch> first = data, last = data;
  first[1].pixels[1 * per] = 255;
  last[1].pixels[6 * per] = 255;
  const std::vector<HostBatch> without = {data[0], data[2]};
  const StepRun a = gpu_step_run(s, start, first, 2, 0.01), b = gpu_step_run(s, start, last, 2, 0.01),
                c = gpu_step_run(s, start, without, 2, 0.01);
  for (const StepRun* r : {&a, &b}) {
    EXPECT_EQ(r->nonfinite, 1);
    EXPECT_EQ(r->sums.skipped, 1);
    EXPECT_EQ(r->sums.samples, 16.0);  // the skipped step's figures are left out
    EXPECT_EQ(r->weights, c.weights);
    EXPECT_EQ(r->m, c.m);
  }
  EXPECT_EQ(c.nonfinite, -1);
  const StepRun on_cpu = cpu_step_run(s, start, first, 2, 0.01);
  EXPECT_EQ(on_cpu.nonfinite, 1);
  EXPECT_EQ(on_cpu.sums.samples, 16.0);
  EXPECT_NEAR(a.sums.loss, on_cpu.sums.loss, 1e-4 * on_cpu.sums.loss);
}

// [data] progressive's batches: ResNet-18 built for 64 px, trained two steps at 32 px, two at 64 px
// and two at 32 px again, the raw batches saying their size as the loader's do (HostBatch::height,
// width); each with the Batches whose augmentation rendered it (for the CPU's floats).
struct SizedRun {
  Batches small{8, 4, "resnet18.toml", {32, 32, 3}}, big{8, 3, "resnet18.toml", {64, 64, 3}, 6};
  std::vector<std::pair<const Batches*, HostBatch>> steps;
  SizedRun() {
    const std::pair<const Batches*, int> order[] = {{&small, 0}, {&small, 1}, {&big, 0},
                                                    {&big, 1},   {&small, 2}, {&small, 3}};
    for (const auto& [from, k] : order) {
      HostBatch b = from->batches[size_t(k)];
      b.height = int(from->stored.height), b.width = int(from->stored.width);
      steps.emplace_back(from, std::move(b));
    }
  }
  SizedRun(const SizedRun&) = delete;  // steps point at its own Batches
  SizedRun& operator=(const SizedRun&) = delete;
  // The evaluation batch, at the size the net was built for.
  HostBatch eval() const {
    HostBatch b = big.batches[2];
    b.height = b.width = 64;
    return b;
  }
  static HostBatch floats(const Batches& s, const HostBatch& b) {
    HostBatch f = floats_of(s, b);
    f.height = b.height, f.width = b.width;
    return f;
  }
};

// The GPU step over a SizedRun (an evaluation at 64 px after the fourth step): its figures, weights,
// momentum and the evaluation's losses.
struct SizedGpuRun {
  StepRun run;
  std::vector<float> eval_losses;
  int graphed_sizes = 0;
};

SizedGpuRun gpu_sized_run(const SizedRun& r, const Net& start, gpu::MathMode math, bool graph, double lr) {
  Net net = start;
  Optimizer opt(net.config().train, net);
  gpu::GpuStepOptions o;
  o.math = math;
  o.graph = graph;
  gpu::GpuStep step(0, net, opt, r.big.aug.format(), 8, 0, 1, o);
  SizedGpuRun g;
  for (size_t k = 0; k < r.steps.size(); ++k) {
    step.train(r.steps[k].second, 500 + k, lr);
    if (k != 3) continue;
    const HostBatch e = r.eval();
    step.evaluate(e);
    g.eval_losses.assign(step.losses(), step.losses() + e.n);
  }
  const gpu::StepMetrics m = step.take_metrics();
  g.run.sums.loss = m.loss_sum;
  g.run.sums.samples = m.samples;
  g.graphed_sizes = step.graphed_sizes();
  step.sync_to(net, opt);
  g.run.weights = net.weights();
  g.run.m = opt.m;
  return g;
}

// [data] progressive on both backends: across the size changes (into 64 px, whose first step runs
// op by op and whose next is captured, and back to 32 px, whose graph of one slot was captured
// before and replays) the GPU's fp32 step follows the CPU step, which reshapes its net to each
// batch: the loss sum, the weights, the momentum, and an evaluation at 64 px between the sizes.
// The step keeps graphs of both sizes. (The residual blocks start at zero, as in the recipe test.)
void sizes_follow_the_cpu_trainer() {
  const SizedRun r;
  NetConfig cfg = r.big.cfg;
  cfg.zero_init_residual = true;
  Net start(cfg, Dims{3, 64, 64}, 10);
  start.init_weights(11);
  const double lr = 0.01;
  Net cpu = start;
  Optimizer cpu_opt(cfg.train, cpu);
  CpuStep cpu_step(cpu, cpu_opt, 1, false);
  EpochSums cpu_sums;
  std::vector<float> cpu_eval;
  for (size_t k = 0; k < r.steps.size(); ++k) {
    cpu_step.train(SizedRun::floats(*r.steps[k].first, r.steps[k].second), 500 + k, lr, cpu_sums);
    if (k != 3) continue;
    const HostBatch e = SizedRun::floats(r.big, r.eval());
    cpu_step.evaluate(e);
    cpu_eval.assign(cpu.losses(), cpu.losses() + e.n);
  }
  EXPECT_EQ(cpu.input_dims(), (Dims{3, 32, 32}));  // the last batch's size
  const SizedGpuRun g = gpu_sized_run(r, start, gpu::MathMode::fp32, true, lr);
  EXPECT_EQ(g.graphed_sizes, 2);
  EXPECT_EQ(g.run.sums.samples, 8.0 * r.steps.size());
  EXPECT_NEAR(g.run.sums.loss, cpu_sums.loss, 1e-4 * cpu_sums.loss);
  EXPECT_LT(test::rel_l2(g.run.weights, cpu.weights()), 1e-3);
  EXPECT_LT(test::rel_l2(g.run.m, cpu_opt.m), 1e-2);
  EXPECT_LT(test::rel_l2(g.eval_losses, cpu_eval), 1e-3);
}

// Across the same size changes the captured graphs (two sizes, two slots each) replay what the
// op-by-op step does, bit for bit, in either math mode (bf16: the stem's folded input at each size).
void sized_graphs_replay(gpu::MathMode math) {
  const SizedRun r;
  const SizedGpuRun graphed = gpu_sized_run(r, r.big.net, math, true, 0.01);
  const SizedGpuRun plain = gpu_sized_run(r, r.big.net, math, false, 0.01);
  EXPECT_EQ(graphed.graphed_sizes, 2);
  EXPECT_EQ(plain.graphed_sizes, 0);
  EXPECT_EQ(graphed.run.weights, plain.run.weights);
  EXPECT_EQ(graphed.run.sums.loss, plain.run.sums.loss);
  EXPECT_EQ(graphed.eval_losses, plain.eval_losses);
}

// The first n samples of b.
HostBatch first_samples(const HostBatch& b, int n) {
  HostBatch f = b;
  f.n = n;
  f.pixels.resize(b.pixels.size() / size_t(b.n) * size_t(n));
  f.flips.resize(size_t(n));
  f.labels.resize(size_t(n));
  if (!f.keys.empty()) f.keys.resize(size_t(n));
  return f;
}

// Evaluation's graphs replay its op-by-op passes bit for bit: a shape's first pass runs op by op,
// its second is captured and later ones replay it, after a training step too (reading the weights
// that step left), and a smaller last batch gets a graph of its own. Each pass's losses and
// probabilities, with and without graphs.
void evaluation_graphs_replay(gpu::MathMode math, const std::string& config, ImageShape shape) {
  Batches s(16, 3, config, shape);
  const HostBatch whole = s.batches[2], part = first_samples(s.batches[2], 10);
  std::vector<std::vector<float>> figures[2];
  for (int graph = 0; graph < 2; ++graph) {
    Net net = s.net;
    Optimizer opt(s.cfg.train, net.weights().size());
    gpu::GpuStep step(0, net, opt, s.aug.format(), 16, 0, 1, step_options(math, graph == 1));
    const auto evaluate = [&](const HostBatch& b) {
      step.evaluate(b);
      std::vector<float> f(step.losses(), step.losses() + b.n);
      f.insert(f.end(), step.probs(), step.probs() + size_t(b.n) * size_t(s.net.classes()));
      figures[graph].push_back(std::move(f));
    };
    evaluate(whole), evaluate(whole), evaluate(whole);
    step.train(s.batches[0], 500, 0.01);
    step.train(s.batches[1], 501, 0.01);
    evaluate(whole), evaluate(whole), evaluate(part), evaluate(part), evaluate(part);
    EXPECT_EQ(step.eval_graphs(), graph == 1 ? 2 : 0) << config;
  }
  ASSERT_EQ(figures[0].size(), 8u);
  EXPECT_EQ(figures[0], figures[1]) << config;
  EXPECT_EQ(figures[1][0], figures[1][2]) << config;
  EXPECT_NE(figures[1][2], figures[1][3]) << config << ": the training steps left the evaluation as it was";
  EXPECT_EQ(figures[1][3], figures[1][4]) << config;
}

}  // namespace

TEST(GpuStep, RecipeKeysFollowTheCpuTrainer) { recipe_keys_follow_the_cpu_trainer(); }

TEST(GpuStep, AverageAndEvalFlipFollowTheCpuTrainer) { average_and_flip_follow_the_cpu_trainer(); }

TEST(GpuStep, LarsFollowsTheCpuTrainer) { lars_follows_the_cpu_trainer(); }

TEST(GpuStep, AccumulationFollowsTheCpuTrainer) { accumulation_follows_the_cpu_trainer(); }

TEST(GpuStep, AccumulatedStepsFollowTheWholeBatch) { accumulated_steps_follow_the_whole_batch(); }

TEST(GpuStep, ANonFiniteMicroBatchSkipsTheWholeStep) { a_nonfinite_micro_batch_skips_the_whole_step(); }

TEST(GpuStep, ProgressiveSizesFollowTheCpuTrainer) { sizes_follow_the_cpu_trainer(); }

TEST(GpuStep, ProgressiveSizesReplayInGraphs) {
  sized_graphs_replay(gpu::MathMode::fp32);
  sized_graphs_replay(gpu::MathMode::bf16);
}

TEST(GpuStep, EvaluationGraphsReplayTheOpByOpPasses) {
  evaluation_graphs_replay(gpu::MathMode::fp32, "fmnist.toml", {28, 28, 1});
  evaluation_graphs_replay(gpu::MathMode::bf16, "fmnist.toml", {28, 28, 1});
  evaluation_graphs_replay(gpu::MathMode::bf16, "resnet18.toml", {32, 32, 3});
}

TEST(GpuStep, GraphReplaysTheOpByOpStep) { graph_replays(gpu::MathMode::fp32, 64); }

// Every kernel of the bf16 step is deterministic too (own kernels sum in fixed orders), so its
// graph replays bit for bit as well: the fmnist net (reordering at the flatten, fp32 logits,
// dropout), ResNet-18 (batch norm, residual gradients summed in bf16, 1x1 convolutions) and
// ResNet-50 (bottlenecks, a stride-1 projection shortcut).
TEST(GpuStep, GraphReplaysTheOpByOpStepBf16) {
  graph_replays(gpu::MathMode::bf16, 64);
  graph_replays(gpu::MathMode::bf16, 16, "resnet18.toml", {32, 32, 3});
  graph_replays(gpu::MathMode::bf16, 16, "resnet50.toml", {32, 32, 3});
}

TEST(GpuStep, FollowsTheCpuTrainer) { follows_the_cpu_trainer(gpu::MathMode::fp32, {1e-4, 1e-4, 1e-3}); }

// Two and a half to three times what a CPU run that rounds every activation and gradient to bf16,
// as the GPU stores them, shows against the fp32 one on such batches (seeds 3 to 5): loss sum
// 4.2e-3, weights 1.2e-3, momentum 0.13 (the momentum is the gradient sum, and the lowest convolution's
// gradient is the least accurate; see gpu_test_net.cu). A layout or reordering mistake puts the
// momentum error near 1.
TEST(GpuStep, FollowsTheCpuTrainerBf16) { follows_the_cpu_trainer(gpu::MathMode::bf16, {1e-2, 3e-3, 0.35}); }

// A loss that is NaN at every step (a NaN bias in the last fc layer): the device skips every
// update and, with skip_nonfinite, puts batch norm's running statistics back; the host learns of
// step 0 when it waits for that step's slot before queuing step 2, not before (it does not
// synchronise for it); the weights, momentum and running statistics come back as they were.
TEST(GpuStep, NonFiniteLossSkipsTheStepAndIsFoundTwoStepsLate) {
  for (gpu::MathMode math : {gpu::MathMode::fp32, gpu::MathMode::bf16}) {
    Batches s(16, 4, "resnet18.toml", {32, 32, 3});
    Net net = s.net;
    net.weights().back() = std::nanf("");
    const std::vector<float> w0 = net.weights(), s0 = net.state();
    Optimizer opt(s.cfg.train, net.weights().size());
    gpu::GpuStepOptions o;
    o.math = math;
    o.skip_nonfinite = true;
    gpu::GpuStep step(0, net, opt, s.aug.format(), 16, 0, 1, o);
    step.train(s.batches[0], 500, 0.01);
    step.train(s.batches[1], 501, 0.01);
    EXPECT_EQ(step.first_nonfinite().step, -1);
    step.train(s.batches[2], 502, 0.01);
    EXPECT_EQ(step.first_nonfinite().step, 0);
    EXPECT_TRUE(std::isnan(step.first_nonfinite().loss));
    step.train(s.batches[3], 503, 0.01);
    EXPECT_TRUE(step.graphed());
    const gpu::StepMetrics m = step.take_metrics();
    EXPECT_EQ(m.skipped, 4);
    EXPECT_EQ(m.samples, 0.0);  // skipped steps are left out of the sums
    step.sync_to(net, opt);
    EXPECT_EQ(opt.t, 4);
    auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    };
    EXPECT_TRUE(same(net.weights(), w0)) << "a skipped step changed the weights";
    EXPECT_TRUE(same(net.state(), s0)) << "a skipped step changed the running statistics";
    EXPECT_TRUE(std::all_of(opt.m.begin(), opt.m.end(), [](float x) { return x == 0; }));
  }
}
