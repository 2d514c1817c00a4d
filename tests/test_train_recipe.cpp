// The references' recipe keys on the CPU reference: label smoothing against PyTorch's
// CrossEntropyLoss and its definition, zero_init_residual against torchvision's ResNets, the weight
// decay exclusions in every optimiser, and the config reader's refusals of each key.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "shared/error.h"
#include "source_dir.h"
#include "train/layers/softmax_xent.h"
#include "train/net.h"
#include "train/net_config.h"
#include "train/optimizer.h"

using namespace convoy;

namespace {

std::string error_of(const std::string& text) {
  try {
    Net net(parse_net_config(text, "bad.toml"), Dims{1, 8, 8}, 4);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

const std::string kTail =
    "[[layer]]\ntype = \"flatten\"\n[[layer]]\ntype = \"fc\"\nunits = 4\n[[layer]]\ntype = \"softmax_xent\"\n";

// A shipped config with `line` added under its [net] or [train] table.
NetConfig shipped_with(const std::string& file, const std::string& table, const std::string& line) {
  std::string text = read_net_config(test::config_path(file)).text;
  const size_t at = text.find(table + "\n");
  EXPECT_NE(at, std::string::npos) << file;
  text.insert(at + table.size() + 1, line + "\n");
  return parse_net_config(text, file);
}

// A small residual net: a convolution with bias, batch norm and ReLU, then a block whose branch is
// a convolution and batch norm, joined to the ReLU by an add, then the head (an fc with bias).
const std::string kResidual = R"([[layer]]
name = "stem"
type = "conv"
filters = 3
kernel = 3
pad = 1
[[layer]]
name = "stem.bn"
type = "batch_norm"
[[layer]]
name = "stem.relu"
type = "relu"
[[layer]]
name = "branch"
type = "conv"
filters = 3
kernel = 3
pad = 1
bias = false
[[layer]]
name = "branch.bn"
type = "batch_norm"
[[layer]]
name = "sum"
type = "add"
inputs = ["branch.bn", "stem.relu"]
[[layer]]
name = "gap"
type = "global_avg_pool"
[[layer]]
name = "fc"
type = "fc"
units = 4
[[layer]]
name = "loss"
type = "softmax_xent"
)";

std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

}  // namespace

// PyTorch's values, from /usr/bin/python3 (torch 1.13) in float64:
//   z = torch.tensor([[1.0, -0.5, 2.0, 0.25], [-1.0, 0.5, 0.0, 3.0]], dtype=torch.float64, requires_grad=True)
//   l = torch.nn.CrossEntropyLoss(label_smoothing=eps)(z, torch.tensor([2, 0])); l.backward()
TEST(LabelSmoothing, MatchesPytorchCrossEntropyLoss) {
  const float z[8] = {1.0f, -0.5f, 2.0f, 0.25f, -1.0f, 0.5f, 0.0f, 3.0f};
  const int labels[2] = {2, 0};
  struct Want {
    float eps;
    double loss;
    double grad[8];
  } wants[] = {{0.1f,
                2.296703143131282,
                {0.1007816237416481, 0.012776546847348112, -0.1545686206847432, 0.04101045009574701,
                 -0.4545379783251495, 0.02318330551797226, 0.009143018836543167, 0.42221165397063404}},
               {0.3f,
                2.2654531431312814,
                {0.0757816237416481, -0.01222345315265189, -0.07956862068474316, 0.016010450095747003,
                 -0.37953797832514946, -0.0018166944820277458, -0.015856981163456834, 0.39721165397063396}}};
  for (const Want& w : wants) {
    std::vector<float> p(8), loss(2), dz(8);
    EXPECT_NEAR(softmax_xent_forward(2, 4, z, labels, p.data(), loss.data(), w.eps), w.loss, 1e-6) << w.eps;
    softmax_xent_backward(2, 4, p.data(), labels, 0.5f, dz.data(), w.eps);
    for (int j = 0; j < 8; ++j) EXPECT_NEAR(dz[j], w.grad[j], 1e-6) << "eps " << w.eps << " logit " << j;
  }
  // Per sample, as reduction='none' gives them.
  std::vector<float> p(8), loss(2);
  softmax_xent_forward(2, 4, z, labels, p.data(), loss.data(), 0.1f);
  EXPECT_NEAR(loss[0], 0.6159811347019678, 1e-6);
  EXPECT_NEAR(loss[1], 3.977425151560595, 1e-6);
}

// The loss is the cross-entropy against the smoothed target, written out here as its definition:
// -sum_k t_k log p_k with t = (1 - eps) onehot + eps / classes; without smoothing, the old loss
// and gradient bit for bit.
TEST(LabelSmoothing, IsTheCrossEntropyAgainstTheSmoothedTarget) {
  const int n = 5, classes = 7;
  const std::vector<float> z = random_vec(size_t(n) * classes, 3);
  const int labels[n] = {0, 6, 3, 3, 1};
  for (float eps : {0.f, 0.05f, 0.1f, 0.5f, 0.9f}) {
    std::vector<float> p(z.size()), loss(n), dz(z.size());
    softmax_xent_forward(n, classes, z.data(), labels, p.data(), loss.data(), eps);
    softmax_xent_backward(n, classes, p.data(), labels, 1.f, dz.data(), eps);
    for (int i = 0; i < n; ++i) {
      double ce = 0;
      for (int k = 0; k < classes; ++k) {
        const double t = (k == labels[i] ? 1.0 - eps : 0.0) + double(eps) / classes;
        ce -= t * std::log(double(p[size_t(i) * classes + k]));
        EXPECT_NEAR(dz[size_t(i) * classes + k], p[size_t(i) * classes + k] - t, 1e-6);
      }
      EXPECT_NEAR(loss[i], ce, 1e-5 * std::max(1.0, ce)) << "eps " << eps << " sample " << i;
    }
  }
  std::vector<float> p(z.size()), loss(n), dz(z.size()), p0(z.size()), loss0(n), dz0(z.size());
  const double mean = softmax_xent_forward(n, classes, z.data(), labels, p.data(), loss.data());
  EXPECT_EQ(softmax_xent_forward(n, classes, z.data(), labels, p0.data(), loss0.data(), 0.f), mean);
  softmax_xent_backward(n, classes, p.data(), labels, 0.2f, dz.data());
  softmax_xent_backward(n, classes, p0.data(), labels, 0.2f, dz0.data(), 0.f);
  EXPECT_EQ(loss, loss0);
  EXPECT_EQ(dz, dz0);
}

// In a net, the recipe's smoothing applies to training passes; evaluation reports the plain
// cross-entropy, bit for bit the loss of the same net without the key.
TEST(LabelSmoothing, TrainingUsesItAndEvaluationDoesNot) {
  Net plain(parse_net_config(kResidual, "r.toml"), Dims{2, 5, 5});
  Net smoothed(parse_net_config("[train]\nlabel_smoothing = 0.2\n" + kResidual, "r.toml"), Dims{2, 5, 5});
  EXPECT_EQ(smoothed.config().train.label_smoothing, 0.2);
  plain.init_weights(4);
  smoothed.init_weights(4);
  const int n = 3;
  const std::vector<float> x = random_vec(size_t(n) * 50, 5);
  const int32_t labels[n] = {1, 3, 0};
  EXPECT_EQ(plain.forward(n, x.data(), labels, false), smoothed.forward(n, x.data(), labels, false));
  const double train_plain = plain.forward(n, x.data(), labels, true);
  const double train_smoothed = smoothed.forward(n, x.data(), labels, true);
  EXPECT_GT(std::fabs(train_smoothed - train_plain), 1e-3);
  // The training loss is the smoothed loss of the net's own probabilities.
  double want = 0;
  for (int i = 0; i < n; ++i) {
    double ce = 0;
    for (int k = 0; k < 4; ++k)
      ce -= ((k == labels[i] ? 0.8 : 0.0) + 0.2 / 4) * std::log(double(smoothed.probs()[size_t(i) * 4 + k]));
    want += ce / n;
  }
  EXPECT_NEAR(train_smoothed, want, 1e-5);
}

// torchvision's resnet18/resnet50(zero_init_residual=True) zero the weight of layerL.B.bn2 (basic
// blocks) or bn3 (bottlenecks) in every block, and no other: 8 and 16 of them (listed by
// /usr/bin/python3 with torchvision: the 1-d `.weight` parameters that are all 0). The downsample
// shortcuts' batch norms, which feed the same adds, keep their 1s. Every other value is what the
// net without the key starts with.
TEST(ZeroInitResidual, ZeroesWhatTorchvisionZeroes) {
  struct Want {
    const char* file;
    const char* bn;
    int blocks[4];
  } wants[] = {{"resnet18.toml", "bn2", {2, 2, 2, 2}}, {"resnet50.toml", "bn3", {3, 4, 6, 3}}};
  for (const Want& w : wants) {
    std::set<std::string> expected;
    for (int l = 0; l < 4; ++l)
      for (int b = 0; b < w.blocks[l]; ++b)
        expected.insert("layer" + std::to_string(l + 1) + "." + std::to_string(b) + "." + w.bn + ".gamma");
    const NetConfig plain_cfg = read_net_config(test::config_path(w.file));
    const NetConfig cfg = shipped_with(w.file, "[net]", "zero_init_residual = true");
    ASSERT_TRUE(cfg.zero_init_residual);
    Net plain(plain_cfg, Dims{3, 32, 32}, 10), net(cfg, Dims{3, 32, 32}, 10);
    plain.init_weights(9);
    net.init_weights(9);
    std::set<std::string> zeroed;
    for (const ParamBlock& b : net.blocks()) {
      const auto first = net.weights().begin() + long(b.offset);
      const bool gamma = b.name.size() > 6 && b.name.compare(b.name.size() - 6, 6, ".gamma") == 0;
      if (gamma && std::all_of(first, first + long(b.count), [](float v) { return v == 0.f; })) zeroed.insert(b.name);
      if (expected.count(b.name)) continue;
      EXPECT_TRUE(std::equal(first, first + long(b.count), plain.weights().begin() + long(b.offset))) << b.name;
    }
    EXPECT_EQ(zeroed, expected) << w.file;
    EXPECT_EQ(net.residual_norms().size(), expected.size()) << w.file;
    EXPECT_TRUE(plain.residual_norms().empty());
  }
}

// A block's first step with its branch's scale at 0: the block is the identity, so nothing reaches
// the branch's convolution (its gradient is exactly 0) while the zeroed scale itself learns.
TEST(ZeroInitResidual, ABlockStartsAsTheIdentity) {
  Net net(parse_net_config("[net]\nzero_init_residual = true\n" + kResidual, "r.toml"), Dims{2, 5, 5});
  net.init_weights(6);
  ASSERT_EQ(net.residual_norms().size(), 1u);
  EXPECT_EQ(net.nodes()[size_t(net.residual_norms()[0])].spec.name, "branch.bn");
  const int n = 4;
  const std::vector<float> x = random_vec(size_t(n) * 50, 7);
  const int32_t labels[n] = {1, 3, 0, 2};
  net.forward(n, x.data(), labels, true);
  net.backward();
  for (const ParamBlock& b : net.blocks()) {
    const auto g = net.grads().begin() + long(b.offset);
    const bool zero = std::all_of(g, g + long(b.count), [](float v) { return v == 0.f; });
    EXPECT_EQ(zero, b.name == "branch.weight") << b.name;
  }
}

// Which input of a join is the branch is told by depth; two inputs equally deep are refused in
// one line naming the join, and only when the key asks for it.
TEST(ZeroInitResidual, AJoinOfEquallyDeepInputsIsRefused) {
  const std::string twins =
      "[[layer]]\nname = \"a\"\ntype = \"batch_norm\"\n[[layer]]\nname = \"b\"\ntype = \"batch_norm\"\ninputs = "
      "\"data\"\n[[layer]]\nname = \"j\"\ntype = \"add\"\ninputs = [\"a\", \"b\"]\n" +
      kTail;
  EXPECT_EQ(error_of("[net]\nzero_init_residual = true\n" + twins),
            "bad.toml:10: layer 'j': zero_init_residual: its inputs lie equally deep in the net, so which is the "
            "residual branch (whose last batch norm would start at 0) cannot be told");
  EXPECT_EQ(error_of(twins), "");
}

// Every parameter moves either as it would with no weight decay at all or as it would with decay,
// bit for bit, and which one is the keys' choice: batch norm's gamma and beta under
// weight_decay_norm = false, every bias (beta too) under weight_decay_bias = false. SGD, Adam, AdamW.
TEST(WeightDecayExclusions, ExcludedParametersMoveByTheirGradientAlone) {
  Net net(parse_net_config(kResidual, "r.toml"), Dims{2, 5, 5});
  net.init_weights(8);
  const std::vector<float> w0 = net.weights(), g = random_vec(w0.size(), 9);
  for (OptimizerKind kind : {OptimizerKind::sgd, OptimizerKind::adam, OptimizerKind::adamw})
    for (int keys = 1; keys < 4; ++keys) {
      TrainRecipe r;
      r.optimizer = kind;
      r.weight_decay = 0.1;
      r.weight_decay_norm = !(keys & 1);
      r.weight_decay_bias = !(keys & 2);
      TrainRecipe none = r;
      none.weight_decay = 0;
      Optimizer excluding(r, net), all(r, w0.size()), no_decay(none, w0.size());
      std::vector<float> w = w0, w_all = w0, w_none = w0;
      for (int step = 0; step < 2; ++step) {
        excluding.step(w, g, 0.05);
        all.step(w_all, g, 0.05);
        no_decay.step(w_none, g, 0.05);
      }
      std::set<std::string> excluded;
      for (const ParamBlock& b : net.blocks())
        for (size_t i = b.offset; i < b.offset + b.count; ++i) {
          ASSERT_NE(w_all[i], w_none[i]) << b.name;  // the decay moves every parameter
          ASSERT_TRUE(w[i] == w_all[i] || w[i] == w_none[i]) << b.name << " " << i;
          if (w[i] == w_none[i]) excluded.insert(b.name);
          ASSERT_EQ(w[i] == w_none[i], excluded.count(b.name) == 1) << b.name << ": a block moves as one";
        }
      std::set<std::string> want;
      if (keys & 1) want.insert({"stem.bn.gamma", "stem.bn.beta", "branch.bn.gamma", "branch.bn.beta"});
      if (keys & 2) want.insert({"stem.bias", "stem.bn.beta", "branch.bn.beta", "fc.bias"});
      EXPECT_EQ(excluded, want) << "keys " << keys << " optimiser " << int(kind);
    }
}

// The keys at their defaults, or no weight decay at all, need no mask: the update is the one there
// was before the keys.
TEST(WeightDecayExclusions, NoMaskWhereEveryParameterDecays) {
  Net net(parse_net_config(kResidual, "r.toml"), Dims{2, 5, 5});
  TrainRecipe r;
  EXPECT_TRUE(no_decay_mask(net, r).empty());
  r.weight_decay_bias = false;
  EXPECT_EQ(no_decay_mask(net, r).size(), (net.weights().size() + 31) / 32);
  r.weight_decay = 0;
  EXPECT_TRUE(no_decay_mask(net, r).empty());
}

TEST(RecipeKeys, ConfigRefusesBadValuesInOneLine) {
  const std::string tail = "[[layer]]\ntype = \"softmax_xent\"\n";
  EXPECT_EQ(error_of("[train]\nlabel_smoothing = 1\n" + tail),
            "bad.toml:2: 'label_smoothing' must be below 1 (0 <= eps < 1)");
  EXPECT_EQ(error_of("[train]\nlabel_smoothing = -0.1\n" + tail).rfind("bad.toml:2: 'label_smoothing' = ", 0), 0u);
  EXPECT_EQ(error_of("[train]\nlabel_smoothing = \"0.1\"\n" + tail), "bad.toml:2: 'label_smoothing' must be a number");
  EXPECT_EQ(error_of("[train]\nweight_decay_norm = 0\n" + tail),
            "bad.toml:2: 'weight_decay_norm' must be true or false");
  EXPECT_EQ(error_of("[train]\nweight_decay_bias = \"no\"\n" + tail),
            "bad.toml:2: 'weight_decay_bias' must be true or false");
  EXPECT_EQ(error_of("[net]\nzero_init_residual = 1\n" + tail),
            "bad.toml:2: 'zero_init_residual' must be true or false");
  EXPECT_EQ(error_of("[train]\nzero_init_residual = true\n" + tail),
            "bad.toml:2: unknown key 'zero_init_residual' in [train]");
  const NetConfig c = parse_net_config(
      "[net]\nzero_init_residual = true\n[train]\nlabel_smoothing = 0.1\nweight_decay_norm = false\n"
      "weight_decay_bias = false\n" +
          tail,
      "good.toml");
  EXPECT_TRUE(c.zero_init_residual);
  EXPECT_EQ(c.train.label_smoothing, 0.1);
  EXPECT_FALSE(c.train.weight_decay_norm);
  EXPECT_FALSE(c.train.weight_decay_bias);
  const NetConfig d = parse_net_config(tail, "default.toml");
  EXPECT_FALSE(d.zero_init_residual);
  EXPECT_EQ(d.train.label_smoothing, 0.0);
  EXPECT_TRUE(d.train.weight_decay_norm);
  EXPECT_TRUE(d.train.weight_decay_bias);
}
