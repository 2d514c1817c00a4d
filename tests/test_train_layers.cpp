// Forward passes of the CPU layers against direct loops written from the definitions (the
// gradient checks only show that backward matches forward, not that forward is right).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "train/layers/batchnorm.h"
#include "train/layers/concat.h"
#include "train/layers/conv.h"
#include "train/layers/fc.h"
#include "train/layers/pool.h"
#include "train/layers/relu6.h"
#include "train/layers/softmax_xent.h"

using namespace convoy;

namespace {
std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}
}  // namespace

TEST(Layers, ConvMatchesDirectConvolution) {
  struct Case {
    int n, ci, h, w, co, k, stride, pad, groups;
    bool relu;
  } cases[] = {{3, 2, 7, 9, 4, 3, 1, 1, 1, false}, {2, 4, 8, 8, 6, 3, 2, 1, 2, true},
               {5, 3, 6, 5, 2, 1, 1, 0, 1, false}, {2, 3, 11, 11, 4, 5, 2, 2, 1, false},
               {17, 2, 5, 5, 2, 3, 1, 1, 2, true},  // 17 images: uneven groups
               {1, 3, 9, 9, 4, 1, 2, 0, 1, false}};
  for (const Case& c : cases) {
    ConvShape s;
    s.n = c.n, s.c_in = c.ci, s.h_in = c.h, s.w_in = c.w, s.c_out = c.co, s.kh = s.kw = c.k;
    s.stride = c.stride, s.pad = c.pad, s.groups = c.groups, s.relu = c.relu;
    auto x = random_vec(s.in_count(), 1), w = random_vec(s.weight_count(), 2), b = random_vec(c.co, 3);
    std::vector<float> y(s.out_count());
    conv_forward(s, x.data(), w.data(), b.data(), y.data());
    const int ho = s.h_out(), wo = s.w_out(), cgi = c.ci / c.groups, cgo = c.co / c.groups;
    for (int n = 0; n < c.n; ++n)
      for (int o = 0; o < c.co; ++o)
        for (int oy = 0; oy < ho; ++oy)
          for (int ox = 0; ox < wo; ++ox) {
            double sum = b[o];
            const int g = o / cgo;
            for (int ci = 0; ci < cgi; ++ci)
              for (int i = 0; i < c.k; ++i)
                for (int j = 0; j < c.k; ++j) {
                  const int iy = oy * c.stride - c.pad + i, ix = ox * c.stride - c.pad + j;
                  if (iy < 0 || iy >= c.h || ix < 0 || ix >= c.w) continue;
                  sum += double(w[((size_t(o) * cgi + ci) * c.k + i) * c.k + j]) *
                         x[((size_t(n) * c.ci + g * cgi + ci) * c.h + iy) * c.w + ix];
                }
            if (c.relu) sum = std::max(0.0, sum);
            ASSERT_NEAR(y[((size_t(n) * c.co + o) * ho + oy) * wo + ox], sum, 1e-4)
                << "case k" << c.k << " s" << c.stride << " g" << c.groups << " at " << n << "," << o << "," << oy
                << "," << ox;
          }
  }
}

TEST(Layers, PoolsMatchDefinitions) {
  PoolShape s;
  s.n = 2, s.c = 3, s.h_in = 7, s.w_in = 6, s.kh = s.kw = 3, s.stride = 2, s.pad = 1;
  auto x = random_vec(s.in_count(), 4);
  std::vector<float> ymax(s.out_count()), yavg(s.out_count());
  std::vector<int32_t> am(s.out_count());
  max_pool_forward(s, x.data(), ymax.data(), am.data());
  avg_pool_forward(s, x.data(), yavg.data());
  const int ho = s.h_out(), wo = s.w_out();
  ASSERT_EQ(ho, 4);
  ASSERT_EQ(wo, 3);
  for (int p = 0; p < s.n * s.c; ++p)
    for (int oy = 0; oy < ho; ++oy)
      for (int ox = 0; ox < wo; ++ox) {
        float best = -1e30f;
        double sum = 0;
        for (int i = 0; i < 3; ++i)
          for (int j = 0; j < 3; ++j) {
            const int iy = oy * 2 - 1 + i, ix = ox * 2 - 1 + j;
            if (iy < 0 || iy >= 7 || ix < 0 || ix >= 6) continue;
            const float v = x[(size_t(p) * 7 + iy) * 6 + ix];
            best = std::max(best, v);
            sum += v;
          }
        const size_t at = (size_t(p) * ho + oy) * wo + ox;
        EXPECT_EQ(ymax[at], best);
        EXPECT_EQ(x[size_t(p) * 42 + am[at]], best);
        EXPECT_NEAR(yavg[at], sum / 9.0, 1e-6);  // padding counts in the divisor
      }
  std::vector<float> g(6);
  global_avg_pool_forward(2, 3, 42, x.data(), g.data());
  for (int p = 0; p < 6; ++p) {
    double sum = 0;
    for (int i = 0; i < 42; ++i) sum += x[size_t(p) * 42 + i];
    EXPECT_NEAR(g[p], sum / 42, 1e-6);
  }
}

// Output sides in ceil mode as torch.nn.functional.max_pool2d(..., ceil_mode=True) gives them (and
// without, as ceil_mode=False): GoogLeNet's four pools over 224 px, and the rule that drops a last
// window starting in the right padding (5, 3, 3, 1 and 10, 4, 4, 2).
TEST(Layers, MaxPoolCeilModeSidesArePytorchs) {
  struct Case {
    int in, k, stride, pad, ceil, floor;
  } cases[] = {{112, 3, 2, 0, 56, 55}, {56, 3, 2, 0, 28, 27}, {28, 3, 2, 0, 14, 13}, {14, 2, 2, 0, 7, 7},
               {8, 3, 2, 0, 4, 3},     {6, 3, 2, 1, 4, 3},    {5, 3, 3, 1, 2, 2},    {4, 2, 3, 1, 2, 2},
               {9, 3, 1, 1, 9, 9},     {10, 4, 4, 2, 3, 3},   {3, 3, 2, 1, 2, 2}};
  for (const Case& c : cases) {
    EXPECT_EQ(PoolShape::out_side(c.in, c.k, c.stride, c.pad, true), c.ceil) << c.in << " " << c.k << " " << c.stride;
    EXPECT_EQ(PoolShape::out_side(c.in, c.k, c.stride, c.pad, false), c.floor) << c.in << " " << c.k << " " << c.stride;
  }
  // The windows past the input take the maximum of what they hold of it.
  PoolShape s;
  s.n = 1, s.c = 2, s.h_in = 6, s.w_in = 8, s.kh = s.kw = 3, s.stride = 2, s.pad = 1, s.ceil = true;
  ASSERT_EQ(s.h_out(), 4);  // 3 without ceil mode
  ASSERT_EQ(s.w_out(), 5);  // 4 likewise
  auto x = random_vec(s.in_count(), 9);
  std::vector<float> y(s.out_count());
  std::vector<int32_t> am(s.out_count());
  max_pool_forward(s, x.data(), y.data(), am.data());
  for (int p = 0; p < s.c; ++p)
    for (int oy = 0; oy < 4; ++oy)
      for (int ox = 0; ox < 5; ++ox) {
        float best = -1e30f;
        for (int iy = std::max(0, oy * 2 - 1); iy < std::min(6, oy * 2 + 2); ++iy)
          for (int ix = std::max(0, ox * 2 - 1); ix < std::min(8, ox * 2 + 2); ++ix)
            best = std::max(best, x[(size_t(p) * 6 + iy) * 8 + ix]);
        EXPECT_EQ(y[(size_t(p) * 4 + oy) * 5 + ox], best) << p << " " << oy << " " << ox;
      }
}

// A concat node's slices put each input's channels after the previous inputs', in every image
// (torch.cat(xs, 1)); ReLU6 clamps to [0, 6].
TEST(Layers, ConcatAndRelu6MatchDefinitions) {
  Node nd;
  nd.in_dims = {{2, 2, 3}, {1, 2, 3}, {3, 2, 3}};
  nd.out = {6, 2, 3};
  const int n = 2, hw = 6;
  std::vector<std::vector<float>> x;
  for (int k = 0; k < 3; ++k) x.push_back(random_vec(size_t(n) * nd.in_dims[k].size(), 10 + k));
  std::vector<float> y(size_t(n) * 36, NAN);
  for (int k = 0; k < 3; ++k) concat_forward(concat_slice(nd, k, n), x[k].data(), y.data());
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < 6; ++c)
      for (int p = 0; p < hw; ++p) {
        const int k = c < 2 ? 0 : c < 3 ? 1 : 2, ck = c - (k == 0 ? 0 : k == 1 ? 2 : 3);
        EXPECT_EQ(y[(size_t(i) * 6 + c) * hw + p], x[k][(size_t(i) * nd.in_dims[k].c + ck) * hw + p]) << i << c << p;
      }
  // NHWC: a run of each input's channels per pixel.
  const ConcatSlice s = concat_slice(nd, 1, n, true);
  EXPECT_EQ(s.runs, size_t(n) * hw);
  EXPECT_EQ(s.width, 1u);
  EXPECT_EQ(s.pitch, 6u);
  EXPECT_EQ(s.offset, 2u);

  const std::vector<float> v = {-2.f, -0.f, 0.5f, 5.99f, 6.f, 7.f, 1e9f};
  std::vector<float> r(v.size());
  relu6_forward(v.size(), v.data(), r.data());
  EXPECT_EQ(r, (std::vector<float>{0.f, 0.f, 0.5f, 5.99f, 6.f, 6.f, 6.f}));
}

TEST(Layers, FullyConnectedBatchNormSoftmax) {
  FcShape f{3, 5, 4};
  auto x = random_vec(15, 5), w = random_vec(20, 6), b = random_vec(4, 7);
  std::vector<float> y(12);
  fc_forward(f, x.data(), w.data(), b.data(), y.data());
  for (int n = 0; n < 3; ++n)
    for (int o = 0; o < 4; ++o) {
      double s = b[o];
      for (int i = 0; i < 5; ++i) s += double(x[n * 5 + i]) * w[o * 5 + i];
      EXPECT_NEAR(y[n * 4 + o], s, 1e-5);
    }

  BnShape s{4, 2, 3, 1e-5f, 0.1f};
  auto bx = random_vec(24, 8);
  std::vector<float> gamma = {1.5f, 0.5f}, beta = {0.1f, -0.2f}, by(24), mean(2), invstd(2), rm = {0.f, 0.f},
                     rv = {1.f, 1.f};
  bn_forward_train(s, bx.data(), gamma.data(), beta.data(), by.data(), mean.data(), invstd.data(), rm.data(),
                   rv.data());
  for (int c = 0; c < 2; ++c) {
    double m = 0, v = 0;
    for (int n = 0; n < 4; ++n)
      for (int i = 0; i < 3; ++i) m += bx[(n * 2 + c) * 3 + i];
    m /= 12;
    for (int n = 0; n < 4; ++n)
      for (int i = 0; i < 3; ++i) v += std::pow(bx[(n * 2 + c) * 3 + i] - m, 2);
    v /= 12;
    for (int n = 0; n < 4; ++n)
      for (int i = 0; i < 3; ++i)
        EXPECT_NEAR(by[(n * 2 + c) * 3 + i], gamma[c] * (bx[(n * 2 + c) * 3 + i] - m) / std::sqrt(v + 1e-5) + beta[c],
                    1e-5);
    EXPECT_NEAR(rm[c], 0.1 * m, 1e-6);
    EXPECT_NEAR(rv[c], 0.9 + 0.1 * v * 12 / 11, 1e-6);  // the running variance is unbiased
  }

  const float logits[6] = {1.f, 2.f, 3.f, 1000.f, 1000.f, -1000.f};  // the second row would overflow exp
  const int labels[2] = {2, 0};
  float probs[6], loss[2];
  const double mean_loss = softmax_xent_forward(2, 3, logits, labels, probs, loss);
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  EXPECT_NEAR(probs[2], std::exp(3.0) / z, 1e-6);
  EXPECT_NEAR(loss[0], std::log(z) - 3.0, 1e-5);
  EXPECT_NEAR(probs[3], 0.5, 1e-6);
  EXPECT_NEAR(loss[1], std::log(2.0), 1e-5);
  EXPECT_NEAR(mean_loss, (loss[0] + loss[1]) / 2, 1e-6);
}
