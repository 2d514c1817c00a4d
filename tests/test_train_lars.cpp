// LARS on the CPU reference: the update against MLPerf's definition worked by hand (trust ratio,
// momentum over lr-scaled steps, the skip list, a tensor of zero norm), its plan of a net's tensors
// and of chunks, its sums independent of the thread count, and the config reader's keys and refusals.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "config_error.h"
#include "shared/error.h"
#include "source_dir.h"
#include "train/bucket_plan.h"
#include "train/net.h"
#include "train/net_config.h"
#include "train/optimizer.h"
#include "train/optimizer_update.h"

using namespace convoy;

namespace {

const std::string kLoss = "[[layer]]\ntype = \"softmax_xent\"\n";

// A convolution with bias, batch norm, an fc with bias and the loss.
const std::string kNet = R"([[layer]]
name = "conv"
type = "conv"
filters = 2
kernel = 3
[[layer]]
name = "bn"
type = "batch_norm"
[[layer]]
type = "flatten"
[[layer]]
name = "fc"
type = "fc"
units = 3
[[layer]]
type = "softmax_xent"
)";

std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// MLPerf's LARS written out in double for one tensor (lars_optimizer.py: compute_lr, then
// ApplyMomentum at lr 1 of grad * scaled_lr).
void reference_step(std::vector<double>& w, const std::vector<double>& g, std::vector<double>& v, double lr, bool adapt,
                    bool nesterov) {
  const double momentum = 0.9, wd = 0.01, eta = 0.001;
  double wn = 0, gn = 0;
  for (size_t i = 0; i < w.size(); ++i) wn += w[i] * w[i], gn += g[i] * g[i];
  wn = std::sqrt(wn), gn = std::sqrt(gn);
  const double trust = adapt && wn > 0 && gn > 0 ? eta * wn / (gn + wd * wn) : 1.0;
  for (size_t i = 0; i < w.size(); ++i) {
    const double u = lr * trust * (g[i] + (adapt ? wd * w[i] : 0.0));
    v[i] = momentum * v[i] + u;
    w[i] -= nesterov ? u + momentum * v[i] : v[i];
  }
}

}  // namespace

// Four tensors of two elements: A adapted, w = (3, 4) and g = (0.3, 0.4); B on the skip list; C
// adapted with w = 0 and D adapted with g = 0, whose trust ratio is 1. The first step, by hand:
// ||w_A|| = 5, ||g_A|| = 0.5, trust = 0.001 * 5 / (0.5 + 0.01 * 5) = 1 / 110, and
// u_A = trust * (g + 0.01 w) = (0.33, 0.44) / 110 = (0.003, 0.004); B moves by lr g = (0.5, -0.25);
// C by lr g; D by its decay alone, lr 0.01 w. Then two more steps at other rates (the rate enters
// the momentum, as MLPerf's update has it), against the reference in double.
TEST(Lars, UpdateMatchesMlperfsDefinitionWorkedByHand) {
  const std::vector<std::vector<double>> w0 = {{3, 4}, {1, -2}, {0, 0}, {1, 1}};
  const std::vector<std::vector<double>> g = {{0.3, 0.4}, {0.5, -0.25}, {0.1, -0.2}, {0, 0}};
  const bool adapt[4] = {true, false, true, true};
  for (bool nesterov : {false, true}) {
    SCOPED_TRACE(nesterov ? "nesterov" : "heavy ball");
    std::vector<LarsTensor> tensors;
    std::vector<float> w, grad;
    for (size_t t = 0; t < 4; ++t) {
      tensors.push_back({2 * t, 2, 0, 0, adapt[t]});
      for (int i = 0; i < 2; ++i) w.push_back(float(w0[t][i])), grad.push_back(float(g[t][i]));
    }
    const LarsPlan plan = plan_lars(tensors);
    std::vector<float> buf(8, 0.f);
    lars_update(plan, w.data(), grad.data(), buf.data(), 1.f, 0.9f, nesterov, 0.01f, 0.001f, 0.f);
    const float k = nesterov ? 1.9f : 1.f;  // nesterov's first step: u + 0.9 u
    const float want[8] = {3 - 0.003f * k, 4 - 0.004f * k, 1 - 0.5f * k,  -2 + 0.25f * k,
                           -0.1f * k,      0.2f * k,       1 - 0.01f * k, 1 - 0.01f * k};
    for (int i = 0; i < 8; ++i) EXPECT_NEAR(w[i], want[i], 1e-6) << "element " << i;
    std::vector<std::vector<double>> ref = w0, v(4, std::vector<double>(2, 0.0));
    for (size_t t = 0; t < 4; ++t) reference_step(ref[t], g[t], v[t], 1.0, adapt[t], nesterov);
    for (double lr : {2.0, 0.5}) {
      lars_update(plan, w.data(), grad.data(), buf.data(), float(lr), 0.9f, nesterov, 0.01f, 0.001f, 0.f);
      for (size_t t = 0; t < 4; ++t) reference_step(ref[t], g[t], v[t], lr, adapt[t], nesterov);
    }
    for (size_t t = 0; t < 4; ++t)
      for (int i = 0; i < 2; ++i) {
        EXPECT_NEAR(w[2 * t + i], ref[t][i], 1e-6 * std::max(1.0, std::fabs(ref[t][i]))) << "tensor " << t;
        EXPECT_NEAR(buf[2 * t + i], v[t][i], 1e-6 * std::max(1.0, std::fabs(v[t][i]))) << "tensor " << t;
      }
  }
}

// eps joins the trust ratio's denominator: with wd = 0 and eps = ||g||, A's trust halves.
TEST(Lars, EpsilonJoinsTheDenominator) {
  const LarsPlan plan = plan_lars({{0, 2, 0, 0, 1}});
  std::vector<float> w = {3, 4}, g = {0.3f, 0.4f}, buf(2, 0.f), w2 = w, buf2 = buf;
  lars_update(plan, w.data(), g.data(), buf.data(), 1.f, 0.f, false, 0.f, 0.001f, 0.f);
  lars_update(plan, w2.data(), g.data(), buf2.data(), 1.f, 0.f, false, 0.f, 0.001f, 0.5f);
  EXPECT_NEAR(3 - w[0], 0.001 * 5 / 0.5 * 0.3, 1e-6);
  EXPECT_NEAR(3 - w2[0], 0.001 * 5 / 1.0 * 0.3, 1e-6);
}

// A tensor larger than a chunk is summed chunk by chunk in a fixed order: the same bits whatever
// the thread count, and the reference's result.
TEST(Lars, NormsDoNotDependOnTheThreadCount) {
  const size_t n = 3 * kLarsChunk + 1000;
  const LarsPlan plan = plan_lars({{0, 5, 0, 0, 1}, {5, n - 5, 0, 0, 1}});
  ASSERT_EQ(plan.chunks.size(), 1u + 4u);
  EXPECT_EQ(plan.tensors[1].first_chunk, 1u);
  EXPECT_EQ(plan.tensors[1].chunks, 4u);
  EXPECT_EQ(plan.chunks.back().hi, n);
  const std::vector<float> w0 = random_vec(n, 1), g = random_vec(n, 2);
  std::vector<float> out[2];
  const int threads_before = omp_get_max_threads();
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    std::vector<float> w = w0, buf(n, 0.f);
    lars_update(plan, w.data(), g.data(), buf.data(), 0.5f, 0.9f, false, 1e-4f, 0.02f, 0.f);
    out[threads - 1] = w;
  }
  omp_set_num_threads(threads_before);
  EXPECT_TRUE(out[0] == out[1]);
  std::vector<double> ref(w0.begin() + 5, w0.end()), gd(g.begin() + 5, g.end()), v(n - 5, 0.0);
  double wn = 0, gn = 0;
  for (size_t i = 0; i < ref.size(); ++i) wn += ref[i] * ref[i], gn += gd[i] * gd[i];
  const double rate = 0.5 * 0.02 * std::sqrt(wn) / (std::sqrt(gn) + 1e-4 * std::sqrt(wn));
  for (size_t i = 0; i < ref.size(); i += 997)
    EXPECT_NEAR(out[0][5 + i], ref[i] - rate * (gd[i] + 1e-4 * ref[i]), 1e-6) << i;
}

// A net's tensors: under lars, batch norm's gamma and beta and every bias are on the skip list by
// default (MLPerf's), the weight decay keys put them back; the optimiser moves a skipped tensor by
// momentum SGD at the learning rate without decay (and by default without Nesterov, as MLPerf).
TEST(Lars, SkipListIsBatchNormAndBiasesUnlessTheKeysSayOtherwise) {
  struct Case {
    std::string keys;
    std::vector<bool> adapt;  // conv.weight, conv.bias, bn.gamma, bn.beta, fc.weight, fc.bias
  } cases[] = {{"", {true, false, false, false, true, false}},
               {"weight_decay_norm = true\n", {true, false, true, false, true, false}},
               {"weight_decay_bias = true\n", {true, true, false, false, true, true}},
               {"weight_decay_norm = true\nweight_decay_bias = true\n", {true, true, true, true, true, true}}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.keys);
    const NetConfig cfg = parse_net_config("[train]\noptimizer = \"lars\"\n" + c.keys + kNet, "l.toml");
    Net net(cfg, Dims{1, 4, 4});
    net.init_weights(3);
    const Optimizer opt(cfg.train, net);
    ASSERT_EQ(opt.lars.tensors.size(), net.blocks().size());
    EXPECT_TRUE(opt.no_decay.empty());
    EXPECT_TRUE(opt.v.empty());
    for (size_t t = 0; t < net.blocks().size(); ++t) {
      EXPECT_EQ(opt.lars.tensors[t].off, net.blocks()[t].offset) << net.blocks()[t].name;
      EXPECT_EQ(opt.lars.tensors[t].count, net.blocks()[t].count) << net.blocks()[t].name;
      EXPECT_EQ(bool(opt.lars.tensors[t].adapt), c.adapt[t]) << net.blocks()[t].name;
    }
  }
  const NetConfig cfg = parse_net_config("[train]\noptimizer = \"lars\"\nweight_decay = 0.1\n" + kNet, "l.toml");
  Net net(cfg, Dims{1, 4, 4});
  net.init_weights(3);
  Optimizer opt(cfg.train, net);
  std::vector<float> w = net.weights();
  const std::vector<float> g = random_vec(w.size(), 4);
  opt.step(w, g, 0.05);
  opt.step(w, g, 0.1);
  for (const ParamBlock& b : net.blocks()) {
    if (b.name != "bn.gamma" && b.name != "fc.bias") continue;
    for (size_t i = b.offset; i < b.offset + b.count; ++i) {
      const double v1 = 0.05 * g[i], v2 = 0.9 * v1 + 0.1 * g[i];
      EXPECT_NEAR(w[i], net.weights()[i] - v1 - v2, 1e-6) << b.name;
    }
  }
  EXPECT_EQ(opt.t, 2);
}

// Its rates are per tensor: an optimiser over a bare buffer is refused.
TEST(Lars, NeedsTheNetsTensors) {
  TrainRecipe r;
  r.optimizer = OptimizerKind::lars;
  try {
    Optimizer opt(r, 10);
    ADD_FAILURE() << "built without tensors";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "the LARS optimiser takes its rates per parameter tensor: build it from the net");
  }
}

// resnet50.toml's commented LARS recipe (MLPerf's), uncommented in place of its [train] table.
NetConfig resnet50_lars() {
  std::string text = read_net_config(test::config_path("resnet50.toml")).text;
  const size_t from = text.find("\n[train]\n") + 1, to = text.find("\n\n", from), block = text.find("# [train]\n");
  EXPECT_NE(block, std::string::npos);
  std::string lars;
  for (size_t at = block; at < text.size() && text.compare(at, 2, "# ") == 0;) {
    const size_t eol = text.find('\n', at);
    lars += text.substr(at + 2, eol + 1 - (at + 2));
    at = eol + 1;
  }
  text.replace(from, to + 1 - from, lars);
  return parse_net_config(text, "resnet50.toml");
}

TEST(Lars, Resnet50sCommentedRecipeIsMlperfs) {
  const TrainRecipe r = resnet50_lars().train;
  EXPECT_EQ(r.optimizer, OptimizerKind::lars);
  EXPECT_EQ(r.epochs, 42);
  EXPECT_EQ(r.batch, 4096);
  EXPECT_EQ(r.lr, 10.0);
  EXPECT_EQ(r.lars_trust, 0.001);
  EXPECT_EQ(r.lars_eps, 0.0);
  EXPECT_EQ(r.momentum, 0.9);
  EXPECT_FALSE(r.nesterov);
  EXPECT_EQ(r.weight_decay, 2e-4);
  EXPECT_FALSE(r.weight_decay_norm);
  EXPECT_FALSE(r.weight_decay_bias);
  EXPECT_EQ(r.label_smoothing, 0.1);
  EXPECT_EQ(r.warmup_epochs, 5.0);
  EXPECT_EQ(r.min_lr, 1e-4);
}

// The spans an update is given hold whole tensors: ResNet-50's all-reduce buckets at any size each
// begin and end where its tensors do; a span that splits a tensor is refused.
TEST(Lars, EveryBucketHoldsWholeTensors) {
  const NetConfig cfg = resnet50_lars();
  const Net net(cfg, Dims{3, 32, 32}, 10);
  const LarsPlan plan = lars_plan(net, cfg.train);
  // torchvision's resnet50 has 161 parameter tensors: 53 convolutions and the fc's weight adapted.
  ASSERT_EQ(plan.tensors.size(), 161u);
  size_t adapted = 0;
  for (const LarsTensor& t : plan.tensors) adapted += t.adapt;
  EXPECT_EQ(adapted, 54u);
  for (size_t bytes : {size_t(1) << 10, size_t(1) << 16, size_t(1) << 20, size_t(8) << 20, size_t(64) << 20}) {
    size_t covered = 0;
    for (const FlatRange& b : plan_buckets(backward_ranges(net.nodes()), sizeof(float), bytes)) {
      const LarsSlice s = plan.slice(b.lo, b.hi);
      EXPECT_EQ(plan.tensors[s.t0].off, b.lo);
      covered += b.size();
    }
    EXPECT_EQ(covered, plan.params());
  }
  const LarsSlice all = plan.slice(0, plan.params());
  EXPECT_EQ(all.t1 - all.t0, 161u);
  EXPECT_EQ(all.c1 - all.c0, plan.chunks.size());
  const size_t inside = plan.tensors[3].off + 1;
  try {
    plan.slice(inside, plan.params());
    ADD_FAILURE() << "a span splitting a tensor was taken";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "LARS: the update span [" + std::to_string(inside) + ", " +
                                         std::to_string(plan.params()) +
                                         ") does not begin and end where parameter tensors do");
  }
}

TEST(Lars, ConfigKeysAndRefusals) {
  const std::string lars = "[train]\noptimizer = \"lars\"\n";
  EXPECT_EQ(test::config_error(lars + "lars_trust = -0.001\n" + kLoss).rfind("bad.toml:3: 'lars_trust' = -0.001", 0),
            0u);
  EXPECT_EQ(test::config_error(lars + "lars_trust = 0\n" + kLoss),
            "bad.toml:3: 'lars_trust' must be above 0 (0 < eta <= 1)");
  EXPECT_EQ(test::config_error(lars + "lars_trust = 2\n" + kLoss).rfind("bad.toml:3: 'lars_trust' = 2", 0), 0u);
  EXPECT_EQ(test::config_error(lars + "lars_trust = \"0.001\"\n" + kLoss), "bad.toml:3: 'lars_trust' must be a number");
  EXPECT_EQ(test::config_error(lars + "lars_eps = -1e-9\n" + kLoss).rfind("bad.toml:3: 'lars_eps' = ", 0), 0u);
  EXPECT_EQ(test::config_error("[train]\noptimizer = \"adam\"\nlars_trust = 0.001\n" + kLoss),
            "bad.toml:3: 'lars_trust' applies only to optimizer = \"lars\"");
  EXPECT_EQ(test::config_error("[train]\nlars_eps = 0\n" + kLoss),
            "bad.toml:2: 'lars_eps' applies only to optimizer = \"lars\"");
  EXPECT_EQ(test::config_error("[train]\nlars_trust = 0.01\noptimizer = \"lars\"\n" + kLoss), "");  // any order
  EXPECT_EQ(test::config_error("[train]\nlars = true\n" + kLoss), "bad.toml:2: unknown key 'lars' in [train]");

  const NetConfig d = parse_net_config(lars + kLoss, "default.toml");
  EXPECT_EQ(d.train.optimizer, OptimizerKind::lars);
  EXPECT_EQ(d.train.lars_trust, 0.001);
  EXPECT_EQ(d.train.lars_eps, 0.0);
  EXPECT_FALSE(d.train.weight_decay_norm);
  EXPECT_FALSE(d.train.weight_decay_bias);
  EXPECT_FALSE(d.train.nesterov);
  EXPECT_EQ(d.train.momentum, 0.9);
  const NetConfig c = parse_net_config(
      lars + "lars_trust = 0.02\nlars_eps = 1e-9\nweight_decay_norm = true\nnesterov = true\n" + kLoss, "good.toml");
  EXPECT_EQ(c.train.lars_trust, 0.02);
  EXPECT_EQ(c.train.lars_eps, 1e-9);
  EXPECT_TRUE(c.train.weight_decay_norm);
  EXPECT_FALSE(c.train.weight_decay_bias);
  EXPECT_TRUE(c.train.nesterov);
  const NetConfig s = parse_net_config(kLoss, "sgd.toml");  // other optimisers keep their defaults
  EXPECT_TRUE(s.train.weight_decay_norm);
  EXPECT_TRUE(s.train.weight_decay_bias);
  EXPECT_TRUE(s.train.nesterov);
}
