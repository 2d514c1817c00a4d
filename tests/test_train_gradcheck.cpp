// Finite-difference checks of every CPU layer's backward pass: the analytic gradient of
// L = sum(y * r) (r random) against central differences, element by element, in float with a
// tolerance that float rounding cannot reach by chance but a wrong formula always exceeds; and
// every registered op, through Net, in the small net of op_nets.h.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "op_nets.h"
#include "sanitized.h"
#include "train/layers/batchnorm.h"
#include "train/layers/concat.h"
#include "train/layers/conv.h"
#include "train/layers/dropout.h"
#include "train/layers/elementwise.h"
#include "train/layers/fc.h"
#include "train/layers/pool.h"
#include "train/layers/registry.h"
#include "train/layers/relu6.h"
#include "train/layers/softmax_xent.h"
#include "train/net.h"

using namespace convoy;

namespace {

std::vector<float> random_vec(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
  return s;
}

// Compares grad[i] with the central difference (loss(v_i + h) - loss(v_i - h)) / 2h, h = eps/4,
// for every element of v. Where steps of eps and eps/4 disagree, the loss is not smooth there (a
// ReLU or max-pool kink lies within the step) and the element is skipped; at most 5% may be.
// Instrumented code runs the nets' passes several times slower: sanitized builds difference every
// fourth element (each pass still runs whole, so the sanitizers see every access), others all.
#ifdef CONVOY_TEST_SANITIZED
constexpr size_t kEvery = 4;
#else
constexpr size_t kEvery = 1;
#endif

void expect_grad(const char* what, std::vector<float>& v, const std::vector<float>& grad,
                 const std::function<double()>& loss, float eps = 1e-2f, double rtol = 2e-2, double atol = 2e-3) {
  ASSERT_EQ(v.size(), grad.size()) << what;
  auto numeric = [&](size_t i, float h) {
    const float keep = v[i];
    v[i] = keep + h;
    const double up = loss();
    v[i] = keep - h;
    const double down = loss();
    v[i] = keep;
    return (up - down) / (2.0 * double(h));
  };
  int bad = 0, kinks = 0, checked = 0;
  for (size_t i = 0; i < v.size(); i += kEvery, ++checked) {
    const double big = numeric(i, eps), num = numeric(i, eps / 4);
    if (std::fabs(big - num) > atol + rtol * std::fabs(num)) {
      ++kinks;
      continue;
    }
    if (std::fabs(num - grad[i]) > atol + rtol * std::fabs(num)) {
      if (++bad <= 5) ADD_FAILURE() << what << "[" << i << "]: analytic " << grad[i] << " vs numeric " << num;
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << checked << " elements checked differ";
  EXPECT_LE(kinks, checked / 20 + 1) << what << ": too many non-smooth elements to check";
}

}  // namespace

TEST(Gradcheck, ConvStridedPaddedGrouped) {
  for (int variant = 0; variant < 8; ++variant) {
    ConvShape s;
    s.n = 2, s.c_in = 4, s.h_in = 7, s.w_in = 6, s.c_out = 6, s.kh = s.kw = 3;
    if (variant == 0) s.stride = 1, s.pad = 1, s.groups = 1;
    if (variant == 1) s.stride = 2, s.pad = 1, s.groups = 2;
    if (variant == 2) s.kh = s.kw = 1, s.stride = 1, s.pad = 0, s.groups = 1;  // the pointwise path
    if (variant == 3) s.stride = 1, s.pad = 1, s.groups = 1, s.relu = true;    // with the fused ReLU
    // Depthwise (MobileNet's): a filter per channel, at stride 1 and 2, and with two per channel.
    if (variant == 4) s.c_out = 4, s.stride = 1, s.pad = 1, s.groups = 4;
    if (variant == 5) s.c_out = 4, s.stride = 2, s.pad = 1, s.groups = 4;
    if (variant == 6) s.c_out = 8, s.stride = 1, s.pad = 1, s.groups = 4;
    if (variant == 7) s.kh = s.kw = 1, s.stride = 1, s.pad = 0, s.groups = 2;  // grouped pointwise
    auto x = random_vec(s.in_count(), 1), w = random_vec(s.weight_count(), 2), b = random_vec(s.c_out, 3);
    auto r = random_vec(s.out_count(), 4);
    std::vector<float> y(s.out_count()), dx(x.size()), dw(w.size()), db(b.size());
    auto loss = [&] {
      conv_forward(s, x.data(), w.data(), b.data(), y.data());
      return dot(y, r);
    };
    loss();
    conv_backward(s, x.data(), w.data(), y.data(), r.data(), dx.data(), dw.data(), db.data());
    SCOPED_TRACE("variant " + std::to_string(variant));
    // Small steps for the fused ReLU, so that few outputs cross zero within a step.
    const float eps = s.relu ? 1e-3f : 1e-2f;
    expect_grad("conv dx", x, dx, loss, eps);
    expect_grad("conv dw", w, dw, loss, eps);
    expect_grad("conv db", b, db, loss, eps);
  }
}

TEST(Gradcheck, FullyConnected) {
  FcShape s{3, 7, 5};
  auto x = random_vec(3 * 7, 5), w = random_vec(s.weight_count(), 6), b = random_vec(5, 7), r = random_vec(15, 8);
  std::vector<float> y(15), dx(x.size()), dw(w.size()), db(5);
  auto loss = [&] {
    fc_forward(s, x.data(), w.data(), b.data(), y.data());
    return dot(y, r);
  };
  fc_backward(s, x.data(), w.data(), r.data(), dx.data(), dw.data(), db.data());
  expect_grad("fc dx", x, dx, loss);
  expect_grad("fc dw", w, dw, loss);
  expect_grad("fc db", b, db, loss);
}

TEST(Gradcheck, MaxPool) {
  PoolShape s;
  s.n = 2, s.c = 3, s.h_in = 7, s.w_in = 7, s.kh = s.kw = 3, s.stride = 2, s.pad = 1;
  // Distinct values well apart, so that no +-eps step changes which element is the maximum.
  std::vector<float> x(s.in_count());
  for (size_t i = 0; i < x.size(); ++i) x[i] = float((i * 7919) % x.size()) * 0.05f;
  auto r = random_vec(s.out_count(), 9);
  std::vector<float> y(s.out_count()), dx(x.size());
  std::vector<int32_t> am(s.out_count());
  auto loss = [&] {
    max_pool_forward(s, x.data(), y.data(), am.data());
    return dot(y, r);
  };
  loss();
  max_pool_backward(s, r.data(), am.data(), dx.data());
  expect_grad("max pool dx", x, dx, loss, 1e-2f);
}

// PyTorch's ceil_mode: an extra window at the end that reaches past the input (8 rows -> 4, not 3;
// 6 columns -> 3, not 2), and at stride 1 with padding the input's size kept.
TEST(Gradcheck, MaxPoolCeilMode) {
  for (const int stride : {2, 1}) {
    PoolShape s;
    s.n = 2, s.c = 3, s.h_in = 8, s.w_in = 6, s.kh = s.kw = 3, s.stride = stride, s.pad = stride == 1, s.ceil = true;
    ASSERT_EQ(s.h_out(), stride == 2 ? 4 : 8);
    ASSERT_EQ(s.w_out(), stride == 2 ? 3 : 6);
    std::vector<float> x(s.in_count());
    for (size_t i = 0; i < x.size(); ++i) x[i] = float((i * 7919) % x.size()) * 0.05f;
    auto r = random_vec(s.out_count(), 9);
    std::vector<float> y(s.out_count()), dx(x.size());
    std::vector<int32_t> am(s.out_count());
    auto loss = [&] {
      max_pool_forward(s, x.data(), y.data(), am.data());
      return dot(y, r);
    };
    loss();
    max_pool_backward(s, r.data(), am.data(), dx.data());
    expect_grad("max pool (ceil mode) dx", x, dx, loss, 1e-2f);
  }
}

TEST(Gradcheck, AvgPoolAndGlobal) {
  PoolShape s;
  s.n = 2, s.c = 3, s.h_in = 6, s.w_in = 5, s.kh = s.kw = 3, s.stride = 2, s.pad = 1;
  auto x = random_vec(s.in_count(), 10), r = random_vec(s.out_count(), 11);
  std::vector<float> y(s.out_count()), dx(x.size());
  auto loss = [&] {
    avg_pool_forward(s, x.data(), y.data());
    return dot(y, r);
  };
  avg_pool_backward(s, r.data(), dx.data());
  expect_grad("avg pool dx", x, dx, loss);

  auto gx = random_vec(2 * 3 * 20, 12), gr = random_vec(6, 13);
  std::vector<float> gy(6), gdx(gx.size());
  auto gloss = [&] {
    global_avg_pool_forward(2, 3, 20, gx.data(), gy.data());
    return dot(gy, gr);
  };
  global_avg_pool_backward(2, 3, 20, gr.data(), gdx.data());
  expect_grad("global avg pool dx", gx, gdx, gloss);
}

TEST(Gradcheck, Relu) {
  auto x = random_vec(50, 14);
  for (float& v : x) v += v > 0 ? 0.1f : -0.1f;  // away from the kink
  auto r = random_vec(50, 15);
  std::vector<float> y(50), dx(50);
  auto loss = [&] {
    relu_forward(50, x.data(), y.data());
    return dot(y, r);
  };
  loss();
  relu_backward(50, y.data(), r.data(), dx.data());
  expect_grad("relu dx", x, dx, loss);
}

TEST(Gradcheck, Relu6) {
  auto x = random_vec(60, 14, -9.f, 9.f);
  for (float& v : x)  // away from the kinks at 0 and 6
    v += v > 6.f ? 0.1f : v > 3.f ? -0.1f : v > 0.f ? 0.1f : -0.1f;
  auto r = random_vec(60, 15);
  std::vector<float> y(60), dx(60);
  auto loss = [&] {
    relu6_forward(60, x.data(), y.data());
    return dot(y, r);
  };
  loss();
  relu6_backward(60, y.data(), r.data(), dx.data());
  int clipped = 0;
  for (float v : y) clipped += v == 6.f;
  EXPECT_GT(clipped, 5);  // the upper bound is crossed, not only the lower
  expect_grad("relu6 dx", x, dx, loss);
}

// Three inputs of 2, 3 and 1 channels into one output, as the op copies them, in every image.
TEST(Gradcheck, Concat) {
  const int n = 2, hw = 5, cs[3] = {2, 3, 1}, total = 6;
  std::vector<std::vector<float>> x, dx;
  for (int k = 0; k < 3; ++k) x.push_back(random_vec(size_t(n) * cs[k] * hw, 30 + k)), dx.emplace_back(x[k].size());
  auto r = random_vec(size_t(n) * total * hw, 33);
  std::vector<float> y(r.size());
  auto slice = [&](int k) {
    int before = 0;
    for (int i = 0; i < k; ++i) before += cs[i];
    return ConcatSlice{size_t(n), size_t(cs[k]) * hw, size_t(total) * hw, size_t(before) * hw};
  };
  auto loss = [&] {
    for (int k = 0; k < 3; ++k) concat_forward(slice(k), x[k].data(), y.data());
    return dot(y, r);
  };
  loss();
  for (int k = 0; k < 3; ++k) {
    concat_backward(slice(k), r.data(), dx[k].data());
    expect_grad(("concat dx" + std::to_string(k)).c_str(), x[k], dx[k], loss);
  }
}

TEST(Gradcheck, BatchNormTrain) {
  BnShape s{4, 3, 5, 1e-5f, 0.1f};
  const size_t n = size_t(s.n) * s.c * s.hw;
  auto x = random_vec(n, 16), g = random_vec(3, 17, 0.5f, 1.5f), b = random_vec(3, 18), r = random_vec(n, 19);
  std::vector<float> y(n), dx(n), dg(3), dbeta(3), mean(3), invstd(3), rm(3, 0.f), rv(3, 1.f);
  auto loss = [&] {
    bn_forward_train(s, x.data(), g.data(), b.data(), y.data(), mean.data(), invstd.data(), rm.data(), rv.data());
    return dot(y, r);
  };
  loss();
  bn_backward(s, x.data(), r.data(), g.data(), mean.data(), invstd.data(), dx.data(), dg.data(), dbeta.data());
  expect_grad("batch norm dx", x, dx, loss, 5e-3f);
  expect_grad("batch norm dgamma", g, dg, loss, 5e-3f);
  expect_grad("batch norm dbeta", b, dbeta, loss, 5e-3f);
}

TEST(Gradcheck, BatchNormEvalUsesRunningStatistics) {
  BnShape s{2, 2, 3, 1e-5f, 0.1f};
  std::vector<float> x = random_vec(12, 20), g = {2.f, 0.5f}, b = {1.f, -1.f}, rm = {0.5f, -0.5f}, rv = {4.f, 0.25f},
                     y(12);
  bn_forward_eval(s, x.data(), g.data(), b.data(), rm.data(), rv.data(), y.data());
  for (int i = 0; i < 12; ++i) {
    const int c = (i / 3) % 2;
    EXPECT_NEAR(y[i], g[c] * (x[i] - rm[c]) / std::sqrt(rv[c] + 1e-5f) + b[c], 1e-5);
  }
}

TEST(Gradcheck, DropoutMaskIsFixedAndScaled) {
  DropoutShape s{3, 40, 0.5f};
  const uint64_t keys[3] = {11, 12, 13};
  auto x = random_vec(120, 21), r = random_vec(120, 22);
  std::vector<float> y(120), mask(120), dx(120);
  auto loss = [&] {
    dropout_forward(s, 99, keys, x.data(), y.data(), mask.data());
    return dot(y, r);
  };
  loss();
  int dropped = 0;
  for (float m : mask) {
    EXPECT_TRUE(m == 0.f || m == 2.f);
    dropped += m == 0.f;
  }
  EXPECT_GT(dropped, 30);
  EXPECT_LT(dropped, 90);
  dropout_backward(s, mask.data(), r.data(), dx.data());
  expect_grad("dropout dx", x, dx, loss);
}

TEST(Gradcheck, SoftmaxCrossEntropy) {
  const int n = 4, k = 6;
  auto z = random_vec(n * k, 23, -2.f, 2.f);
  const int labels[n] = {0, 5, 2, 2};
  std::vector<float> p(n * k), l(n), dz(n * k);
  auto loss = [&] { return softmax_xent_forward(n, k, z.data(), labels, p.data(), l.data()); };
  loss();
  softmax_xent_backward(n, k, p.data(), labels, 1.f / n, dz.data());
  expect_grad("softmax xent dlogits", z, dz, loss, 1e-2f, 2e-2, 1e-4);
}

// With label smoothing (the recipe's label_smoothing), the target is (1 - eps) onehot + eps / classes.
TEST(Gradcheck, SoftmaxCrossEntropyWithLabelSmoothing) {
  const int n = 4, k = 6;
  auto z = random_vec(n * k, 26, -2.f, 2.f);
  const int labels[n] = {3, 0, 5, 3};
  for (float eps : {0.1f, 0.4f}) {
    std::vector<float> p(n * k), l(n), dz(n * k);
    auto loss = [&] { return softmax_xent_forward(n, k, z.data(), labels, p.data(), l.data(), eps); };
    loss();
    softmax_xent_backward(n, k, p.data(), labels, 1.f / n, dz.data(), eps);
    expect_grad(eps < 0.2f ? "smoothed 0.1 xent dlogits" : "smoothed 0.4 xent dlogits", z, dz, loss, 1e-2f, 2e-2, 1e-4);
  }
}

// A residual net through Net itself: conv/bn/relu, conv with a fused ReLU, a 1x1 conv, a
// residual add whose input has two consumers, avg pool, flatten, fc and the loss; checks the
// weight and input gradients.
TEST(Gradcheck, WholeResidualNet) {
  const std::string with_r2 = R"(
[[layer]]
name = "c1"
type = "conv"
filters = 4
kernel = 3
pad = 1
[[layer]]
name = "bn1"
type = "batch_norm"
[[layer]]
name = "r1"
type = "relu"
[[layer]]
name = "c2"
type = "conv"
filters = 4
kernel = 3
pad = 1
[[layer]]
name = "r2"
type = "relu"
[[layer]]
name = "c3"
type = "conv"
filters = 4
kernel = 1
bias = false
[[layer]]
name = "sum"
type = "add"
inputs = ["c3", "r1"]
[[layer]]
name = "pool"
type = "avg_pool"
kernel = 2
[[layer]]
name = "flat"
type = "flatten"
[[layer]]
name = "fc"
type = "fc"
units = 3
[[layer]]
name = "loss"
type = "softmax_xent"
)";
  // Finite differences through a ReLU after a conv land on kinks too often to be a sharp test, so
  // the fused conv+ReLU is checked against the separate ops below and left out here.
  std::string text = with_r2;
  text.erase(text.find("[[layer]]\nname = \"r2\""), std::string("[[layer]]\nname = \"r2\"\ntype = \"relu\"\n").size());
  NetConfig cfg = parse_net_config(text, "inline.toml");
  Net net(cfg, Dims{2, 6, 6});
  net.init_weights(5);
  const int n = 3;
  auto x = random_vec(size_t(n) * 72, 24);
  const int32_t labels[n] = {0, 2, 1};
  auto loss = [&] { return net.forward(n, x.data(), labels, true); };
  loss();
  net.backward(true);
  std::vector<float> gw = net.grads(), gx = net.input_grad();
  expect_grad("net weights", net.weights(), gw, loss, 4e-3f, 3e-2, 1e-3);
  expect_grad("net input", x, gx, loss, 5e-3f, 3e-2, 1e-3);

  // The conv+ReLU fused in Net gives the forward and gradients of the separate ops.
  Net fused(parse_net_config(with_r2, "inline.toml"), Dims{2, 6, 6});
  Net plain(parse_net_config("[net]\nfuse = false\n" + with_r2, "inline.toml"), Dims{2, 6, 6});
  EXPECT_TRUE(fused.nodes()[3].fused_relu);
  EXPECT_EQ(fused.nodes()[4].alias, 3);
  EXPECT_FALSE(plain.nodes()[3].fused_relu);
  fused.init_weights(6);
  plain.init_weights(6);
  EXPECT_NEAR(plain.forward(n, x.data(), labels, true), fused.forward(n, x.data(), labels, true), 1e-6);
  plain.backward(true);
  fused.backward(true);
  for (size_t i = 0; i < plain.grads().size(); ++i)
    ASSERT_NEAR(plain.grads()[i], fused.grads()[i], 1e-6 + 1e-5 * std::fabs(plain.grads()[i])) << i;
  for (size_t i = 0; i < plain.input_grad().size(); ++i)
    ASSERT_NEAR(plain.input_grad()[i], fused.input_grad()[i], 1e-6 + 1e-5 * std::fabs(plain.input_grad()[i])) << i;
}

// Every registered op in the small net of op_nets.h (a convolution before it, an fc and the loss
// after it), training mode: the gradients of every weight and of the input against central
// differences, so that an op's backward pass is checked once it is registered.
TEST(Gradcheck, EveryRegisteredOpInANet) {
  const int n = 3;
  const int32_t labels[n] = {0, 2, 1};
  const uint64_t keys[n] = {11, 12, 13};
  for (const Op* op : registered_ops()) {
    SCOPED_TRACE(std::string("op ") + op->type());
    Net net(parse_net_config(test::op_net(*op), "op.toml"), test::kOpNetInput);
    net.init_weights(8);
    auto x = random_vec(size_t(n) * test::kOpNetInput.size(), 25);
    auto loss = [&] { return net.forward(n, x.data(), labels, true, 99, keys); };
    loss();
    net.backward(true);
    std::vector<float> gw = net.grads(), gx = net.input_grad();
    expect_grad("net weights", net.weights(), gw, loss, 4e-3f, 3e-2, 1e-3);
    expect_grad("net input", x, gx, loss, 5e-3f, 3e-2, 1e-3);
  }
}

// The blocks of the shipped GoogLeNet and MobileNetV2 in small nets through Net: an inception block
// (branches of other widths, one of them the net's input, joined by a concat, a stride-1 max pool
// with padding in ceil mode, another at stride 2), and an inverted residual (1x1 expansion, a
// depthwise 3x3, a linear 1x1 projection, batch norms and the residual add). Its activations are
// GELUs, not MobileNetV2's ReLU6: behind batch norms, whose statistics every weight moves, a step of
// any weight crosses some of the hundreds of ReLU6 kinks, and a third of the weights showed no
// smooth stretch to difference over (ReLU6's own gradient is checked above, and in a net by
// EveryRegisteredOpInANet).
TEST(Gradcheck, InceptionAndInvertedResidualBlocks) {
  auto layer = [](const std::string& name, const std::string& type, const std::string& keys) {
    return "[[layer]]\nname = \"" + name + "\"\ntype = \"" + type + "\"\n" + keys;
  };
  const std::string tail = layer("gap", "global_avg_pool", "") + layer("fc", "fc", "units = 3\n") +
                           layer("loss", "softmax_xent", "");
  const std::string inception = layer("stem", "conv", "filters = 4\npad = 1\n") +
                                layer("b1", "conv", "inputs = \"stem\"\nfilters = 2\nkernel = 1\n") +
                                layer("b2a", "conv", "inputs = \"stem\"\nfilters = 2\nkernel = 1\n") +
                                layer("b2", "conv", "filters = 3\npad = 1\n") +
                                layer("b4p", "max_pool",
                                      "inputs = \"stem\"\nkernel = 3\nstride = 1\npad = 1\nceil_mode = true\n") +
                                layer("b4", "conv", "filters = 2\nkernel = 1\n") +
                                layer("cat", "concat", "inputs = [\"b1\", \"b2\", \"data\", \"b4\"]\n") +
                                layer("pool", "max_pool", "kernel = 3\nstride = 2\nceil_mode = true\n") + tail;
  const std::string inverted = layer("c0", "conv", "filters = 8\npad = 1\nbias = false\n") +
                               layer("bn0", "batch_norm", "") + layer("r0", "gelu", "") +
                               layer("e", "conv", "filters = 16\nkernel = 1\nbias = false\n") +
                               layer("bne", "batch_norm", "") + layer("re", "gelu", "") +
                               layer("dw", "conv", "filters = 16\npad = 1\ngroups = 16\nbias = false\n") +
                               layer("bnd", "batch_norm", "") + layer("rd", "gelu", "") +
                               layer("p", "conv", "filters = 8\nkernel = 1\nbias = false\n") +
                               layer("bnp", "batch_norm", "") + layer("sum", "add", "inputs = [\"bnp\", \"r0\"]\n") +
                               tail;
  const int n = 3;
  const int32_t labels[n] = {0, 2, 1};
  for (const std::string& text : {inception, inverted}) {
    Net net(parse_net_config(text, "block.toml"), Dims{3, 6, 6});
    SCOPED_TRACE(net.nodes()[0].spec.name == "stem" ? "inception" : "inverted residual");
    if (net.nodes()[0].spec.name == "stem") {
      EXPECT_EQ(net.nodes()[6].out, (Dims{10, 6, 6}));  // the concat: 2 + 3 + 3 + 2 channels
      EXPECT_EQ(net.nodes()[7].out, (Dims{10, 3, 3}));  // ceil mode: 6 -> 3, not 2
    }
    net.init_weights(9);
    auto x = random_vec(size_t(n) * 3 * 36, 26);
    auto loss = [&] { return net.forward(n, x.data(), labels, true); };
    loss();
    net.backward(true);
    std::vector<float> gw = net.grads(), gx = net.input_grad();
    expect_grad("net weights", net.weights(), gw, loss, 4e-3f, 3e-2, 1e-3);
    expect_grad("net input", x, gx, loss, 5e-3f, 3e-2, 1e-3);
  }
}
