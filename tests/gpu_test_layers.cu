// Every CUDA op against its CPU reference on random inputs. Tolerances (fp32 mode): relative
// max-norm error 1e-5 for elementwise ops and pooling (same arithmetic), 1e-4 for reductions and
// matrix products (different summation order); masks and argmax indices must match exactly.
// bf16 mode (NHWC, the GpuBf16 tests): the CPU reference gets the same inputs rounded to bf16, so
// only the GPU's storage of its results differs; a bf16 tensor must be within 1e-2 relative L2
// error (one rounding is at most 2^-9 relative, about 1e-3 in L2 over many values), fp32 results
// (statistics, parameter gradients, probabilities) within 1e-4, and ops that round once from the
// same float arithmetic (ReLU, add, dropout, augmentation, reordering) bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "bf16_host.h"
#include "input/augment.h"
#include "rel_l2.h"
#include "train/cuda/batch_metrics.h"
#include "train/cuda/channels.cuh"
#include "train/cuda/layout_convert.h"
#include "train/cuda/normalize_input.h"
#include "train/cuda/weight_copy.h"
#include "train/layers/batchnorm.h"
#include "train/layers/concat.h"
#include "train/layers/conv.h"
#include "train/layers/dropout.h"
#include "train/layers/elementwise.h"
#include "train/layers/fc.h"
#include "train/layers/pool.h"
#include "train/layers/relu6.h"
#include "train/layers/softmax_xent.h"
#include "train/optimizer_update.h"

using namespace convoy;

namespace {

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

template <typename T>
gpu::DeviceBuffer<T> up(const std::vector<T>& v) {
  gpu::DeviceBuffer<T> b(v.size());
  b.upload(v.data(), v.size());
  return b;
}

template <typename T>
std::vector<T> down(gpu::Context& ctx, const gpu::DeviceBuffer<T>& b) {
  ctx.synchronize();
  std::vector<T> v(b.size());
  b.download(v.data(), v.size());
  return v;
}

// max |a - b| / max(max |b|, 1e-6): one number per tensor, stable for tensors with tiny entries.
double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, ref = 1e-6;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    diff = std::max(diff, double(std::fabs(a[i] - b[i])));
    ref = std::max(ref, double(std::fabs(b[i])));
  }
  return diff / ref;
}

// Output buffers start as NaN so an element the kernel never writes cannot pass.
gpu::DeviceBuffer<float> poisoned(size_t n) { return up(std::vector<float>(n, NAN)); }

struct Gpu : ::testing::Test {
  gpu::Context ctx{0};
};

struct GpuBf16 : ::testing::Test {
  gpu::Context ctx{0, size_t(256) << 20, gpu::MathMode::bf16};
};

constexpr double kBf16 = 1e-2;  // relative L2 error of a bf16 tensor against the CPU's fp32 one

using test::down_bf16;
using test::pack_input;
using test::poisoned_bf16;
using test::rel_l2;
using test::round_bf16;
using test::to_nchw;
using test::to_nhwc;
using test::up_bf16;

// A concat node over inputs of cs channels, h x w pixels: what concat_slice reads.
Node concat_node(const std::vector<int>& cs, int h, int w) {
  Node nd;
  int total = 0;
  for (int c : cs) nd.in_dims.push_back({c, h, w}), total += c;
  nd.out = {total, h, w};
  return nd;
}

// The conv weights [c_out, c, kh, kw] in cuDNN's NHWC filter order [c_out, kh, kw, c], written out
// independently of the library's index arithmetic.
std::vector<float> krsc(const std::vector<float>& w, int k, int c, int rs) {
  std::vector<float> out(w.size());
  for (int o = 0; o < k; ++o)
    for (int i = 0; i < c; ++i)
      for (int p = 0; p < rs; ++p) out[(size_t(o) * rs + p) * c + i] = w[(size_t(o) * c + i) * rs + p];
  return out;
}

}  // namespace

TEST_F(Gpu, ConvForwardBackward) {
  // The last four: depthwise (MobileNet's, at stride 1 and 2, and two filters per channel) and a
  // grouped 1x1.
  for (ConvShape s : {ConvShape{4, 3, 28, 28, 32, 3, 3, 1, 1, 1}, ConvShape{2, 16, 15, 13, 8, 3, 3, 2, 1, 1},
                      ConvShape{3, 8, 9, 9, 8, 1, 1, 1, 0, 1}, ConvShape{2, 8, 10, 10, 8, 3, 3, 1, 1, 4},
                      ConvShape{2, 3, 32, 32, 16, 7, 7, 2, 3, 1}, ConvShape{2, 16, 9, 9, 16, 3, 3, 1, 1, 16},
                      ConvShape{2, 24, 11, 10, 24, 3, 3, 2, 1, 24}, ConvShape{2, 8, 7, 7, 16, 3, 3, 1, 1, 8},
                      ConvShape{3, 16, 6, 6, 8, 1, 1, 1, 0, 4}}) {
    auto x = randn(s.in_count(), 1), w = randn(s.weight_count(), 2, 0.2f), b = randn(s.c_out, 3);
    auto dy = randn(s.out_count(), 4);
    std::vector<float> y(s.out_count()), dx(s.in_count()), dw(s.weight_count()), db(s.c_out);
    convoy::conv_forward(s, x.data(), w.data(), b.data(), y.data());
    convoy::conv_backward(s, x.data(), w.data(), y.data(), dy.data(), dx.data(), dw.data(), db.data());

    gpu::ConvPlan plan(ctx, s);
    auto gx = up(x), gw = up(w), gb = up(b), gdy = up(dy);
    auto gy = poisoned(y.size()), gdx = poisoned(dx.size()), gdw = poisoned(dw.size()), gdb = poisoned(db.size());
    gpu::conv_forward(ctx, plan, gx.get(), gw.get(), gb.get(), gy.get());
    gpu::conv_backward(ctx, plan, gx.get(), gw.get(), gdy.get(), gdx.get(), gdw.get(), gdb.get());
    EXPECT_LT(rel_err(down(ctx, gy), y), 1e-4) << "groups " << s.groups;
    EXPECT_LT(rel_err(down(ctx, gdx), dx), 1e-4);
    EXPECT_LT(rel_err(down(ctx, gdw), dw), 1e-4);
    EXPECT_LT(rel_err(down(ctx, gdb), db), 1e-4);
    // dx_add: the input gradient added to what dx holds (a second consumer's part).
    const auto held = randn(dx.size(), 5);
    auto gsum = up(held);
    gpu::conv_backward(ctx, plan, gx.get(), gw.get(), gdy.get(), gsum.get(), gdw.get(), gdb.get(), true);
    std::vector<float> want(dx.size());
    for (size_t k = 0; k < dx.size(); ++k) want[k] = held[k] + dx[k];
    EXPECT_LT(rel_err(down(ctx, gsum), want), 1e-4) << "dx_add";
  }
}

TEST_F(Gpu, FcForwardBackward) {
  FcShape s{37, 300, 10};
  auto x = randn(size_t(s.n) * s.in, 5), w = randn(s.weight_count(), 6, 0.1f), b = randn(s.out, 7);
  auto dy = randn(size_t(s.n) * s.out, 8);
  std::vector<float> y(size_t(s.n) * s.out), dx(x.size()), dw(w.size()), db(s.out);
  convoy::fc_forward(s, x.data(), w.data(), b.data(), y.data());
  convoy::fc_backward(s, x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data());
  auto gx = up(x), gw = up(w), gb = up(b), gdy = up(dy);
  auto gy = poisoned(y.size()), gdx = poisoned(dx.size()), gdw = poisoned(dw.size()), gdb = poisoned(db.size());
  gpu::fc_forward(ctx, s, gx.get(), gw.get(), gb.get(), gy.get());
  gpu::fc_backward(ctx, s, gx.get(), gw.get(), gdy.get(), gdx.get(), gdw.get(), gdb.get());
  EXPECT_LT(rel_err(down(ctx, gy), y), 1e-4);
  EXPECT_LT(rel_err(down(ctx, gdx), dx), 1e-4);
  EXPECT_LT(rel_err(down(ctx, gdw), dw), 1e-4);
  EXPECT_LT(rel_err(down(ctx, gdb), db), 1e-4);
}

TEST_F(Gpu, Pooling) {
  for (PoolShape s :
       {PoolShape{3, 5, 28, 28, 2, 2, 2, 0}, PoolShape{2, 4, 15, 17, 3, 3, 2, 1}, PoolShape{2, 3, 9, 9, 3, 3, 1, 1}}) {
    auto x = randn(s.in_count(), 9), dy = randn(s.out_count(), 10);
    std::vector<float> y(s.out_count()), dx(s.in_count()), ya(s.out_count()), dxa(s.in_count());
    std::vector<int32_t> am(s.out_count());
    convoy::max_pool_forward(s, x.data(), y.data(), am.data());
    convoy::max_pool_backward(s, dy.data(), am.data(), dx.data());
    convoy::avg_pool_forward(s, x.data(), ya.data());
    convoy::avg_pool_backward(s, dy.data(), dxa.data());
    auto gx = up(x), gdy = up(dy);
    auto gy = poisoned(y.size()), gdx = poisoned(dx.size()), gya = poisoned(y.size()), gdxa = poisoned(dx.size());
    gpu::DeviceBuffer<int32_t> gam(am.size());
    gpu::max_pool_forward(ctx, s, gx.get(), gy.get(), gam.get());
    gpu::max_pool_backward(ctx, s, gdy.get(), gam.get(), gdx.get());
    gpu::avg_pool_forward(ctx, s, gx.get(), gya.get());
    gpu::avg_pool_backward(ctx, s, gdy.get(), gdxa.get());
    EXPECT_EQ(down(ctx, gam), am);
    EXPECT_LT(rel_err(down(ctx, gy), y), 1e-6);
    EXPECT_LT(rel_err(down(ctx, gdx), dx), 1e-5);
    EXPECT_LT(rel_err(down(ctx, gya), ya), 1e-5);
    EXPECT_LT(rel_err(down(ctx, gdxa), dxa), 1e-5);
  }
  // Max pooling in ceil mode (GoogLeNet's): windows past the input's end, and at stride 1 with padding.
  for (PoolShape s : {PoolShape{2, 5, 16, 15, 3, 3, 2, 0, true}, PoolShape{2, 4, 14, 13, 2, 2, 2, 0, true},
                      PoolShape{2, 3, 9, 8, 3, 3, 1, 1, true}, PoolShape{2, 3, 10, 9, 3, 3, 2, 1, true}}) {
    auto x = randn(s.in_count(), 19), dy = randn(s.out_count(), 20);
    std::vector<float> y(s.out_count()), dx(s.in_count());
    std::vector<int32_t> am(s.out_count());
    convoy::max_pool_forward(s, x.data(), y.data(), am.data());
    convoy::max_pool_backward(s, dy.data(), am.data(), dx.data());
    auto gx = up(x), gdy = up(dy), gy = poisoned(y.size()), gdx = poisoned(dx.size());
    gpu::DeviceBuffer<int32_t> gam(am.size());
    gpu::max_pool_forward(ctx, s, gx.get(), gy.get(), gam.get());
    gpu::max_pool_backward(ctx, s, gdy.get(), gam.get(), gdx.get());
    EXPECT_EQ(down(ctx, gam), am) << "ceil mode, " << s.h_in << "x" << s.w_in << " k" << s.kh << " s" << s.stride;
    EXPECT_EQ(down(ctx, gy), y);
    EXPECT_LT(rel_err(down(ctx, gdx), dx), 1e-5);
  }
  const int n = 3, c = 7, hw = 49;
  auto x = randn(size_t(n) * c * hw, 11), dy = randn(size_t(n) * c, 12);
  std::vector<float> y(n * c), dx(x.size());
  convoy::global_avg_pool_forward(n, c, hw, x.data(), y.data());
  convoy::global_avg_pool_backward(n, c, hw, dy.data(), dx.data());
  auto gx = up(x), gdy = up(dy), gy = poisoned(y.size()), gdx = poisoned(dx.size());
  gpu::global_avg_pool_forward(ctx, n, c, hw, gx.get(), gy.get());
  gpu::global_avg_pool_backward(ctx, n, c, hw, gdy.get(), gdx.get());
  EXPECT_LT(rel_err(down(ctx, gy), y), 1e-5);
  EXPECT_LT(rel_err(down(ctx, gdx), dx), 1e-6);
}

TEST_F(Gpu, ElementwiseOps) {
  const size_t n = 100003;
  auto a = randn(n, 13), b = randn(n, 14), dy = randn(n, 15);
  std::vector<float> y(n), dx(n), s(n), acc = b;
  convoy::relu_forward(n, a.data(), y.data());
  convoy::relu_backward(n, y.data(), dy.data(), dx.data());
  convoy::add_forward(n, a.data(), b.data(), s.data());
  convoy::accumulate(n, a.data(), acc.data());
  auto ga = up(a), gb = up(b), gdy = up(dy), gacc = up(b);
  auto gy = poisoned(n), gdx = poisoned(n), gs = poisoned(n);
  gpu::relu_forward(ctx, n, ga.get(), gy.get());
  gpu::relu_backward(ctx, n, gy.get(), gdy.get(), gdx.get());
  gpu::add_forward(ctx, n, ga.get(), gb.get(), gs.get());
  gpu::accumulate(ctx, n, ga.get(), gacc.get());
  EXPECT_EQ(down(ctx, gy), y);
  EXPECT_EQ(down(ctx, gdx), dx);
  EXPECT_EQ(down(ctx, gs), s);
  EXPECT_EQ(down(ctx, gacc), acc);
  // ReLU6 over values spread past both bounds (0 and 6), and from 1 element on (the unpacked rest).
  for (size_t m : {n, size_t(5)}) {
    auto x6 = randn(m, 16, 5.f);
    std::vector<float> y6(m), dx6(m);
    convoy::relu6_forward(m, x6.data(), y6.data());
    convoy::relu6_backward(m, y6.data(), dy.data(), dx6.data());
    auto gx6 = up(x6), gy6 = poisoned(m), gdx6 = poisoned(m);
    gpu::relu6_forward(ctx, m, gx6.get(), gy6.get());
    gpu::relu6_backward(ctx, m, gy6.get(), gdy.get(), gdx6.get());
    EXPECT_EQ(down(ctx, gy6), y6) << m;
    EXPECT_EQ(down(ctx, gdx6), dx6) << m;
  }
}

// Concat of inputs of 8, 16, 3 and 5 channels: the output and each input's gradient, written and
// added to what it holds, bit for bit (copies, and one float sum). At 6x6 every slice moves in
// 16-byte packs, at 5x7 the last two one value at a time.
TEST_F(Gpu, ConcatEqualsCpu) {
  const std::vector<int> cs = {8, 16, 3, 5};
  for (const int h : {6, 5}) {
    const Node nd = concat_node(cs, h, h == 6 ? 6 : 7);
    const int n = 3;
    auto dy = randn(size_t(n) * nd.out.size(), 50);
    std::vector<float> y(dy.size(), NAN);
    auto gdy = up(dy), gy = poisoned(y.size());
    std::vector<gpu::DeviceBuffer<float>> gx;
    for (size_t k = 0; k < cs.size(); ++k) {
      const auto x = randn(size_t(n) * nd.in_dims[k].size(), 51 + uint32_t(k));
      convoy::concat_forward(concat_slice(nd, int(k), n), x.data(), y.data());
      gx.push_back(up(x));
      gpu::concat_forward(ctx, concat_slice(nd, int(k), n), gx[k].get(), gy.get());
    }
    EXPECT_EQ(down(ctx, gy), y) << h;
    for (size_t k = 0; k < cs.size(); ++k) {
      const ConcatSlice sl = concat_slice(nd, int(k), n);
      std::vector<float> dx(size_t(n) * nd.in_dims[k].size()), held = randn(dx.size(), 60 + uint32_t(k));
      convoy::concat_backward(sl, dy.data(), dx.data());
      auto gdx = poisoned(dx.size()), gsum = up(held);
      gpu::concat_backward(ctx, sl, gdy.get(), gdx.get());
      gpu::concat_backward(ctx, sl, gdy.get(), gsum.get(), true);
      EXPECT_EQ(down(ctx, gdx), dx) << "input " << k;
      for (size_t i = 0; i < dx.size(); ++i) held[i] += dx[i];
      EXPECT_EQ(down(ctx, gsum), held) << "input " << k << ", added";
    }
  }
}

TEST_F(Gpu, DropoutMaskEqualsCpu) {
  DropoutShape s{16, 257, 0.3f};
  std::vector<uint64_t> keys(s.n);
  for (int i = 0; i < s.n; ++i) keys[i] = 1000003ull * i + 17;
  auto x = randn(size_t(s.n) * s.per_sample, 16), dy = randn(x.size(), 17);
  std::vector<float> y(x.size()), mask(x.size()), dx(x.size());
  convoy::dropout_forward(s, 42, keys.data(), x.data(), y.data(), mask.data());
  convoy::dropout_backward(s, mask.data(), dy.data(), dx.data());
  auto gkeys = up(keys);
  auto gx = up(x), gdy = up(dy), gy = poisoned(x.size()), gmask = poisoned(x.size()), gdx = poisoned(x.size());
  // The step key lives on the device (a captured step reads it there); the salt is xor-ed in.
  auto gkey = up(std::vector<uint64_t>{40});
  gpu::dropout_forward(ctx, s, gkey.get(), 2, gkeys.get(), gx.get(), gy.get(), gmask.get());
  gpu::dropout_backward(ctx, s, gmask.get(), gdy.get(), gdx.get());
  EXPECT_EQ(down(ctx, gmask), mask);
  EXPECT_EQ(down(ctx, gy), y);
  EXPECT_EQ(down(ctx, gdx), dx);
  size_t dropped = std::count(mask.begin(), mask.end(), 0.f);
  EXPECT_NEAR(double(dropped) / mask.size(), 0.3, 0.05);
}

// With and without label smoothing (the recipe's label_smoothing), over fewer classes than a warp
// has lanes and over many more.
TEST_F(Gpu, SoftmaxCrossEntropy) {
  for (int classes : {10, 1000})
    for (float eps : {0.f, 0.1f, 0.3f}) {
      SCOPED_TRACE(std::to_string(classes) + " classes, label smoothing " + std::to_string(eps));
      const int n = 50;
      auto logits = randn(size_t(n) * classes, 18, 3.f);
      std::vector<int> labels(n);
      for (int i = 0; i < n; ++i) labels[i] = (i * 7) % classes;
      std::vector<float> probs(logits.size()), loss(n), dl(logits.size());
      convoy::softmax_xent_forward(n, classes, logits.data(), labels.data(), probs.data(), loss.data(), eps);
      convoy::softmax_xent_backward(n, classes, probs.data(), labels.data(), 1.f / n, dl.data(), eps);
      auto glab = up(labels);
      auto gl = up(logits), gp = poisoned(probs.size()), gloss = poisoned(n), gdl = poisoned(dl.size());
      gpu::softmax_xent_forward(ctx, n, classes, gl.get(), glab.get(), gp.get(), gloss.get(), eps);
      gpu::softmax_xent_backward(ctx, n, classes, gp.get(), glab.get(), 1.f / n, gdl.get(), eps);
      EXPECT_LT(rel_err(down(ctx, gp), probs), 1e-5);
      EXPECT_LT(rel_err(down(ctx, gloss), loss), 1e-5);
      EXPECT_LT(rel_err(down(ctx, gdl), dl), 1e-5);
    }
}

TEST_F(Gpu, BatchNorm) {
  for (BnShape s : {BnShape{8, 6, 25}, BnShape{32, 20, 1}}) {
    const size_t count = size_t(s.n) * s.c * s.hw;
    auto x = randn(count, 19, 2.f), dy = randn(count, 20), gamma = randn(s.c, 21), beta = randn(s.c, 22);
    std::vector<float> y(count), ye(count), dx(count), dg(s.c), dbeta(s.c), mean(s.c), invstd(s.c);
    std::vector<float> rmean(s.c, 0.1f), rvar(s.c, 0.9f);
    convoy::bn_forward_train(s, x.data(), gamma.data(), beta.data(), y.data(), mean.data(), invstd.data(), rmean.data(),
                             rvar.data());
    convoy::bn_forward_eval(s, x.data(), gamma.data(), beta.data(), rmean.data(), rvar.data(), ye.data());
    convoy::bn_backward(s, x.data(), dy.data(), gamma.data(), mean.data(), invstd.data(), dx.data(), dg.data(),
                        dbeta.data());
    auto gx = up(x), gdy = up(dy), gg = up(gamma), gbeta = up(beta);
    auto grm = up(std::vector<float>(s.c, 0.1f)), grv = up(std::vector<float>(s.c, 0.9f));
    auto gy = poisoned(count), gye = poisoned(count), gdx = poisoned(count), gdg = poisoned(s.c), gdb = poisoned(s.c),
         gmean = poisoned(s.c), ginv = poisoned(s.c);
    gpu::bn_forward_train(ctx, s, gx.get(), gg.get(), gbeta.get(), gy.get(), gmean.get(), ginv.get(), grm.get(),
                          grv.get());
    gpu::bn_forward_eval(ctx, s, gx.get(), gg.get(), gbeta.get(), grm.get(), grv.get(), gye.get());
    gpu::bn_backward(ctx, s, gx.get(), gdy.get(), gg.get(), gmean.get(), ginv.get(), gdx.get(), gdg.get(), gdb.get());
    EXPECT_LT(rel_err(down(ctx, gy), y), 1e-4);
    EXPECT_LT(rel_err(down(ctx, gmean), mean), 1e-4);
    EXPECT_LT(rel_err(down(ctx, ginv), invstd), 1e-4);
    EXPECT_LT(rel_err(down(ctx, grm), rmean), 1e-4);
    EXPECT_LT(rel_err(down(ctx, grv), rvar), 1e-4);
    EXPECT_LT(rel_err(down(ctx, gye), ye), 1e-4);
    EXPECT_LT(rel_err(down(ctx, gdx), dx), 1e-4);
    EXPECT_LT(rel_err(down(ctx, gdg), dg), 1e-4);
    EXPECT_LT(rel_err(down(ctx, gdb), dbeta), 1e-4);
  }
}

TEST_F(Gpu, OptimizerUpdatesMatchCpu) {
  const size_t n = 10007;
  const auto g = randn(n, 30), w0 = randn(n, 31);
  for (int t = 1; t <= 3; ++t) {
    // SGD with Nesterov momentum.
    std::vector<float> w = w0, buf(n, 0.1f);
    convoy::sgd_update(n, w.data(), g.data(), buf.data(), 0.05f, 0.9f, true, 5e-4f);
    auto gw = up(w0), gg = up(g), gbuf = up(std::vector<float>(n, 0.1f));
    auto sc = up(std::vector<gpu::StepScalars>{gpu::step_scalars(0, 0.05, 0.9, 0.999, t)});
    gpu::sgd_update(gpu::UpdateSpan{0, n, ctx.stream()}, gw.get(), gpu::Gradients{gg.get()}, gbuf.get(), sc.get(), 0.9f,
                    true, 5e-4f);
    EXPECT_LT(rel_err(down(ctx, gw), w), 1e-6);
    EXPECT_LT(rel_err(down(ctx, gbuf), buf), 1e-6);
    // AdamW at step t (bias corrections from the device scalars).
    std::vector<float> wa = w0, m(n, 0.01f), v(n, 0.02f);
    convoy::adam_update(n, wa.data(), g.data(), m.data(), v.data(), 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, true, t);
    auto gwa = up(w0), gm = up(std::vector<float>(n, 0.01f)), gv = up(std::vector<float>(n, 0.02f));
    auto sca = up(std::vector<gpu::StepScalars>{gpu::step_scalars(0, 1e-3, 0.9, 0.999, t)});
    gpu::adam_update(gpu::UpdateSpan{0, n, ctx.stream()}, gwa.get(), gpu::Gradients{gg.get()}, gm.get(), gv.get(),
                     sca.get(), 0.9f, 0.999f, 1e-8f, 0.01f, true);
    EXPECT_LT(rel_err(down(ctx, gwa), wa), 1e-6) << "step " << t;
    EXPECT_LT(rel_err(down(ctx, gm), m), 1e-6);
    EXPECT_LT(rel_err(down(ctx, gv), v), 1e-6);
  }
}

// The weight decay exclusions (the recipe's weight_decay_norm / weight_decay_bias): a mask of
// scattered runs over a buffer of a length no multiple of 32, in two spans (as two all-reduce
// buckets update it); the CPU's update, and elements under the mask move without decay.
TEST_F(Gpu, OptimizerUpdatesWithoutDecayWhereMaskedMatchCpu) {
  const size_t n = 10007, cut = 4133;
  const auto g = randn(n, 32), w0 = randn(n, 33);
  std::vector<uint32_t> mask((n + 31) / 32, 0u);
  for (size_t i = 0; i < n; ++i)
    if ((i / 97) % 3 == 1 || i % 1000 < 5) mask[i / 32] |= 1u << (i % 32);
  auto gmask = up(mask);
  auto gg = up(g);
  for (bool adam : {false, true}) {
    SCOPED_TRACE(adam ? "adamw" : "sgd");
    std::vector<float> w = w0, plain = w0, m(n, 0.01f), v(n, 0.02f), m2 = m, v2 = v;
    auto gw = up(w0), gm = up(m), gv = up(v);
    for (int t = 1; t <= 3; ++t) {
      auto sc = up(std::vector<gpu::StepScalars>{gpu::step_scalars(0, 1e-2, 0.9, 0.999, t)});
      for (auto [lo, hi] : {std::pair<size_t, size_t>{0, cut}, {cut, n}}) {
        const gpu::UpdateSpan at{lo, hi, ctx.stream()};
        if (adam)
          gpu::adam_update(at, gw.get(), gpu::Gradients{gg.get()}, gm.get(), gv.get(), sc.get(), 0.9f, 0.999f, 1e-8f,
                           0.1f, true, {}, gmask.get());
        else
          gpu::sgd_update(at, gw.get(), gpu::Gradients{gg.get()}, gm.get(), sc.get(), 0.9f, true, 0.1f, {},
                          gmask.get());
      }
      if (adam) {
        convoy::adam_update(n, w.data(), g.data(), m.data(), v.data(), 1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, true, t,
                            mask.data());
        convoy::adam_update(n, plain.data(), g.data(), m2.data(), v2.data(), 1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, true, t);
      } else {
        convoy::sgd_update(n, w.data(), g.data(), m.data(), 1e-2f, 0.9f, true, 0.1f, mask.data());
        convoy::sgd_update(n, plain.data(), g.data(), m2.data(), 1e-2f, 0.9f, true, 0.1f);
      }
    }
    const std::vector<float> got = down(ctx, gw);
    EXPECT_LT(rel_err(got, w), 1e-6);
    EXPECT_LT(rel_err(down(ctx, gm), m), 1e-6);
    size_t masked = 0;
    for (size_t i = 0; i < n; ++i) {
      const bool skip = mask[i / 32] >> (i % 32) & 1u;
      masked += skip;
      // Where the mask is clear, the decay is taken as without a mask; where set, it is not.
      if (!skip) ASSERT_EQ(w[i], plain[i]) << i;
      if (skip) ASSERT_GT(std::fabs(got[i] - plain[i]), 1e-7f * std::fabs(plain[i])) << i;
    }
    EXPECT_GT(masked, n / 4);
  }
}

// LARS (optimizer_update.h): tensors of a few elements to more than two chunks, adapted or on the
// skip list, one of zero weights (trust 1 at its first step), updated at three rates in two spans
// cut at a tensor boundary (two all-reduce buckets), from fp32 gradients and from the bf16 sums of
// two ranks: the CPU's update (its norms summed in another order: 1e-5), the same bits as one
// update over the whole buffer, and, where the step's loss was not finite, nothing changed.
TEST_F(Gpu, LarsUpdateMatchesCpu) {
  const size_t big = 2 * kLarsChunk + 123;
  const LarsPlan plan = plan_lars(
      {{0, 7, 0, 0, 1}, {7, 3, 0, 0, 0}, {10, big, 0, 0, 1}, {10 + big, 500, 0, 0, 1}, {510 + big, 64, 0, 0, 0}});
  const size_t n = plan.params(), cut = plan.tensors[3].off;
  ASSERT_EQ(plan.chunks.size(), 7u);
  std::vector<float> w0 = randn(n, 40);
  std::fill(w0.begin() + long(cut), w0.begin() + long(cut) + 500, 0.f);
  const std::vector<float> g32 = randn(n, 41, 0.1f);
  std::vector<float> sum2(n), from_sums(n);  // two ranks' sum, and the gradient the kernels read from it
  for (size_t i = 0; i < n; ++i) sum2[i] = 2 * g32[i], from_sums[i] = round_bf16(sum2[i]) / 2;
  auto gt = up(plan.tensors);
  auto gc = up(plan.chunks);
  gpu::DeviceBuffer<double> gsums(2 * plan.chunks.size());
  gpu::DeviceBuffer<float> grates(plan.tensors.size());
  const gpu::LarsDevice dev{&plan, gt.get(), gc.get(), gsums.get(), grates.get()};
  auto gg = up(g32);
  auto gs = up_bf16(sum2);
  for (bool sums : {false, true}) {
    SCOPED_TRACE(sums ? "bf16 sums of 2 ranks" : "fp32 gradients");
    const gpu::Gradients grads = sums ? gpu::Gradients{nullptr, gs.get(), 2} : gpu::Gradients{gg.get()};
    const std::vector<float>& g = sums ? from_sums : g32;
    std::vector<float> w = w0, buf(n, 0.f);
    auto gw = up(w0), gbuf = up(buf), gw_whole = up(w0), gbuf_whole = up(buf);
    for (int t = 1; t <= 3; ++t) {
      const double lr = 0.5 * t;
      auto sc = up(std::vector<gpu::StepScalars>{gpu::step_scalars(0, lr, 0.9, 0.999, t)});
      for (auto [lo, hi] : {std::pair<size_t, size_t>{0, cut}, {cut, n}})
        gpu::lars_update({lo, hi, ctx.stream()}, gw.get(), grads, gbuf.get(), sc.get(), dev, 0.9f, false, 1e-4f, 0.02f,
                         0.f);
      gpu::lars_update({0, n, ctx.stream()}, gw_whole.get(), grads, gbuf_whole.get(), sc.get(), dev, 0.9f, false, 1e-4f,
                       0.02f, 0.f);
      convoy::lars_update(plan, w.data(), g.data(), buf.data(), float(lr), 0.9f, false, 1e-4f, 0.02f, 0.f);
    }
    const std::vector<float> got = down(ctx, gw), got_buf = down(ctx, gbuf);
    EXPECT_LT(rel_err(got, w), 1e-5);
    EXPECT_LT(rel_err(got_buf, buf), 1e-5);
    EXPECT_EQ(got, down(ctx, gw_whole));
    EXPECT_EQ(got_buf, down(ctx, gbuf_whole));
    EXPECT_NE(got[cut], 0.f);  // the zero tensor moved
    gpu::StepScalars skipped = gpu::step_scalars(0, 1.0, 0.9, 0.999, 4);
    skipped.nonfinite = 1;
    auto sc = up(std::vector<gpu::StepScalars>{skipped});
    gpu::lars_update({0, n, ctx.stream()}, gw.get(), grads, gbuf.get(), sc.get(), dev, 0.9f, false, 1e-4f, 0.02f, 0.f);
    EXPECT_EQ(down(ctx, gw), got);
    EXPECT_EQ(down(ctx, gbuf), got_buf);
  }
}

TEST_F(Gpu, NormalizeEqualsCpu) {
  // The loader's augmented 8x8 RGB samples, normalised on the GPU as on the CPU.
  AugmentSpec spec;
  spec.crop = 8, spec.pad = 2, spec.flip = true;
  Augmenter aug(ImageShape{10, 12, 3}, spec, true, {120.0, 110.0, 100.0}, {60.0, 50.0, 0.0});
  const int n = 37;
  std::mt19937 rng(5);
  const size_t per = aug.out_bytes();
  std::vector<uint8_t> px(size_t(n) * per);
  for (auto& p : px) p = uint8_t(rng());
  std::vector<uint8_t> flips(n);
  for (auto& f : flips) f = uint8_t(rng() % 2);
  std::vector<float> want(n * per);
  for (int i = 0; i < n; ++i) aug.normalize(px.data() + i * per, flips[i], want.data() + i * per);
  std::vector<float> ss(aug.scale);
  ss.insert(ss.end(), aug.shift.begin(), aug.shift.end());
  auto gpx = up(px);
  auto gflips = up(flips);
  auto gss = up(ss);
  auto gy = poisoned(want.size());
  gpu::InputShape s{n, 3, aug.out_h, aug.out_w};
  gpu::normalize_input(ctx, s, gpx.get(), gflips.get(), gss.get(), gy.get());
  EXPECT_EQ(down(ctx, gy), want);  // bit for bit: the same float operations in the same order
}

TEST_F(Gpu, BatchMetricsCountAsTheTrainer) {
  const int n = 300, classes = 7;
  std::mt19937 rng(8);
  std::vector<float> probs(size_t(n) * classes), losses(n);
  std::vector<int32_t> labels(n);
  for (auto& p : probs) p = float(rng() % 4) / 4;  // many ties: they go to the lower class index
  for (int i = 0; i < n; ++i) labels[i] = int32_t(rng() % classes), losses[i] = float(rng() % 1000) / 100;
  double loss_sum = 0, hits = 0;
  for (int i = 0; i < n; ++i) {
    const float* p = probs.data() + size_t(i) * classes;
    int above = 0;
    for (int k = 0; k < classes; ++k) above += p[k] > p[labels[i]] || (p[k] == p[labels[i]] && k < labels[i]);
    hits += above == 0;
    loss_sum += losses[i];
  }
  auto gp = up(probs), gl = up(losses);
  auto glab = up(labels);
  auto acc = up(std::vector<double>{1, 2, 3, 0});
  gpu::batch_metrics(ctx, n, classes, gp.get(), glab.get(), gl.get(), acc.get());
  gpu::batch_metrics(ctx, n, classes, gp.get(), glab.get(), gl.get(), acc.get());
  const auto a = down(ctx, acc);
  EXPECT_NEAR(a[0], 1 + 2 * loss_sum, 1e-9 * loss_sum);
  EXPECT_EQ(a[1], 2 + 2 * hits);
  EXPECT_EQ(a[2], 3 + 2 * n);
  EXPECT_NEAR(a[3], loss_sum / n, 1e-9);
  EXPECT_GT(hits, 0);
  EXPECT_LT(hits, n);
}

TEST_F(GpuBf16, ConvForwardBackward) {
  for (ConvShape s : {ConvShape{4, 3, 28, 28, 32, 3, 3, 1, 1, 1},   ConvShape{2, 16, 15, 13, 8, 3, 3, 2, 1, 1},
                      ConvShape{3, 8, 9, 9, 8, 1, 1, 1, 0, 1},      ConvShape{2, 8, 10, 10, 8, 3, 3, 1, 1, 4},
                      ConvShape{2, 3, 32, 32, 16, 7, 7, 2, 3, 1},   ConvShape{4, 1, 28, 28, 32, 3, 3, 1, 1, 1},
                      ConvShape{2, 64, 8, 8, 64, 3, 3, 1, 1, 1},    ConvShape{3, 1, 15, 13, 8, 3, 3, 2, 1, 1},
                      ConvShape{2, 3, 33, 30, 16, 7, 7, 2, 3, 1},   ConvShape{2, 4, 12, 12, 8, 4, 4, 2, 0, 1},
                      ConvShape{2, 16, 15, 13, 24, 1, 1, 2, 0, 1},  ConvShape{3, 64, 8, 8, 32, 1, 1, 2, 0, 1},
                      ConvShape{2, 32, 14, 14, 32, 3, 3, 1, 1, 32}, ConvShape{2, 96, 15, 15, 96, 3, 3, 2, 1, 96},
                      ConvShape{2, 8, 9, 9, 16, 3, 3, 1, 1, 8},     ConvShape{3, 32, 8, 8, 16, 1, 1, 1, 0, 2},
                      ConvShape{2, 16, 11, 11, 16, 5, 5, 2, 2, 16}, ConvShape{2, 960, 7, 7, 960, 3, 3, 1, 1, 960},
                      ConvShape{4, 24, 40, 40, 24, 3, 3, 1, 0, 24}, ConvShape{3, 40, 13, 9, 40, 5, 5, 1, 2, 40},
                      ConvShape{3, 16, 11, 9, 16, 3, 3, 1, 1, 1},   ConvShape{2, 32, 7, 7, 24, 3, 3, 1, 1, 1},
                      ConvShape{2, 8, 9, 9, 16, 5, 5, 1, 2, 1},     ConvShape{2, 16, 10, 10, 8, 3, 3, 1, 0, 1}}) {
    // (Then 1x1 of stride 2, whose forward pass packs the pixels it reads, odd sizes first;
    // depthwise as MobileNetV2's at stride 1 and 2 and with two filters per channel, and a grouped
    // 1x1, which takes cuDNN's kernels, not the product through cuBLAS; last, depthwise 5x5, 960
    // channels (two lanes a block in the filter gradient's sums), unpadded over 200 blocks of sums;
    // then few-channel stride-1 ones, whose filter gradient is a product over each output pixel's
    // window: 3x3 "same", 32 to 24 channels, 5x5, and 3x3 without padding.)
    const int c = s.c_in / s.groups, rs = s.kh * s.kw, hw_in = s.h_in * s.w_in, hw_out = s.h_out() * s.w_out();
    auto x = round_bf16(randn(s.in_count(), 1)), dy = round_bf16(randn(s.out_count(), 4));
    auto w = randn(s.weight_count(), 2, 0.2f), b = randn(s.c_out, 3);
    std::vector<float> y(s.out_count()), dx(s.in_count()), dw(s.weight_count()), db(s.c_out);
    const auto wr = round_bf16(w);  // the GPU multiplies with the rounded copy
    convoy::conv_forward(s, x.data(), wr.data(), b.data(), y.data());
    convoy::conv_backward(s, x.data(), wr.data(), y.data(), dy.data(), dx.data(), dw.data(), db.data());

    // The weight copy, as GpuNet keeps it: refreshed from the fp32 weights on the device.
    gpu::ConvPlan plan(ctx, s);
    const bool depthwise = s.groups == s.c_in && s.c_out == s.c_in && s.c_in % 8 == 0 && (s.kh == 3 || s.kh == 5);
    EXPECT_EQ(plan.depthwise_, depthwise) << "own depthwise kernels for c_in " << s.c_in << " groups " << s.groups;
    const bool windows = s.groups == 1 && s.stride == 1 && s.kh >= 2 && s.c_in % 8 == 0 && s.c_out % 8 == 0 &&
                         s.c_in <= 32 && s.c_out <= 64;
    EXPECT_EQ(plan.cols_bytes_ > 0, windows) << "filter gradient over window rows, c_in " << s.c_in;
    const bool packed = s.kh == 1 && s.stride == 2 && s.groups == 1 && s.c_in <= 32 && s.c_out <= 64;
    EXPECT_EQ(plan.packed_filter_grad_, packed) << "filter gradient over packed pixels, c_in " << s.c_in;
    auto gw32 = up(w);
    std::vector<gpu::WeightSegment> seg;
    if (c > 1 && rs > 1) seg.push_back({0, w.size(), c, rs, 0, c});
    gpu::DeviceBuffer<gpu::WeightSegment> gseg(std::max<size_t>(1, seg.size()));
    if (!seg.empty()) gseg.upload(seg.data(), seg.size());
    auto gw = poisoned_bf16(w.size());
    gpu::refresh_weight_copy(ctx, w.size(), gw32.get(), {gw.get(), gseg.get(), int(seg.size())});
    EXPECT_EQ(down_bf16(ctx, gw), krsc(wr, s.c_out, c, rs)) << "weight copy";

    auto gx = up_bf16(to_nhwc(x, s.n, s.c_in, hw_in)), gdy = up_bf16(to_nhwc(dy, s.n, s.c_out, hw_out));
    auto gb = up(b);
    auto gy = poisoned_bf16(y.size()), gdx = poisoned_bf16(dx.size()), gscratch = poisoned_bf16(dw.size());
    auto gdw = poisoned(dw.size()), gdb = poisoned(db.size());
    gpu::conv_forward(ctx, plan, gx.get(), gw.get(), gb.get(), gy.get());
    gpu::conv_backward(ctx, plan, gx.get(), gw.get(), gdy.get(), gdx.get(), gdw.get(), gdb.get(), gscratch.get());
    EXPECT_LT(rel_l2(to_nchw(down_bf16(ctx, gy), s.n, s.c_out, hw_out), y), kBf16)
        << "groups " << s.groups << " c_in " << s.c_in;
    EXPECT_LT(rel_l2(to_nchw(down_bf16(ctx, gdx), s.n, s.c_in, hw_in), dx), kBf16);
    EXPECT_LT(rel_l2(down(ctx, gdw), dw), kBf16);
    EXPECT_LT(rel_l2(down(ctx, gdb), db), 1e-4);
    if (depthwise) {  // the filter gradient's sums run in a fixed order
      const auto first = down(ctx, gdw);
      gpu::conv_backward(ctx, plan, gx.get(), gw.get(), gdy.get(), gdx.get(), gdw.get(), gdb.get(), gscratch.get());
      EXPECT_EQ(down(ctx, gdw), first) << "depthwise filter gradient repeats bit for bit";
    }
    // dx_add: the input gradient added to what dx holds (a second consumer's part), rounded once.
    {
      const auto held = round_bf16(randn(dx.size(), 5));
      auto gsum = up_bf16(held);
      gpu::conv_backward(ctx, plan, gx.get(), gw.get(), gdy.get(), gsum.get(), gdw.get(), gdb.get(), gscratch.get(),
                         true);
      const auto got = to_nchw(down_bf16(ctx, gsum), s.n, s.c_in, hw_in), h = to_nchw(held, s.n, s.c_in, hw_in);
      std::vector<float> want(dx.size());
      for (size_t k = 0; k < dx.size(); ++k) want[k] = h[k] + dx[k];
      EXPECT_LT(rel_l2(got, want), kBf16) << "dx_add";
    }

    // A first layer on few channels, as GpuNet runs it: the input padded with zero channels to 8
    // and the weight copy padded likewise (a segment moved to its own place, zero elsewhere).
    if (s.groups != 1 || s.c_in >= 8) continue;
    const int cp = 8;
    gpu::ConvPlan pplan(ctx, s, true, cp);
    std::vector<float> xp(size_t(s.n) * hw_in * cp, 0.f);
    const auto xn = to_nhwc(x, s.n, s.c_in, hw_in);
    for (size_t q = 0; q < size_t(s.n) * hw_in; ++q)
      for (int ch = 0; ch < s.c_in; ++ch) xp[q * cp + ch] = xn[q * s.c_in + ch];
    const size_t padded = size_t(s.c_out) * rs * cp, at = w.size() + 5;  // after the flat weights
    std::vector<gpu::WeightSegment> pseg{{0, w.size(), c, rs, at, cp}};
    gpu::DeviceBuffer<gpu::WeightSegment> gpseg(1);
    gpseg.upload(pseg.data(), 1);
    auto gpw = up_bf16(std::vector<float>(at + padded, 0.f));
    gpu::refresh_weight_copy(ctx, w.size(), gw32.get(), {gpw.get(), gpseg.get(), 1});
    const auto copy = down_bf16(ctx, gpw);
    const auto want = krsc(wr, s.c_out, c, rs);
    for (size_t k = 0; k < size_t(s.c_out) * rs; ++k)
      for (int ch = 0; ch < cp; ++ch)
        ASSERT_EQ(copy[at + k * cp + ch], ch < c ? want[k * c + ch] : 0.f) << "padded weight copy at " << k;
    auto gxp = up_bf16(xp);
    auto gyp = poisoned_bf16(y.size()), gdxp = poisoned_bf16(xp.size()), gsp = poisoned_bf16(padded);
    auto gdwp = poisoned(dw.size() + 16), gdbp = poisoned(db.size());
    gpu::conv_forward(ctx, pplan, gxp.get(), gpw.get() + at, gb.get(), gyp.get());
    gpu::conv_backward(ctx, pplan, gxp.get(), gpw.get() + at, gdy.get(), gdxp.get(), gdwp.get(), gdbp.get(), gsp.get());
    EXPECT_LT(rel_l2(to_nchw(down_bf16(ctx, gyp), s.n, s.c_out, hw_out), y), kBf16) << "padded, c_in " << s.c_in;
    const auto dwp = down(ctx, gdwp);
    EXPECT_LT(rel_l2(std::vector<float>(dwp.begin(), dwp.begin() + dw.size()), dw), kBf16);
    for (size_t k = dw.size(); k < dwp.size(); ++k) ASSERT_TRUE(std::isnan(dwp[k])) << "dw written past its end";
    const auto dxp = down_bf16(ctx, gdxp);
    std::vector<float> dxr(size_t(s.n) * hw_in * s.c_in);
    for (size_t q = 0; q < size_t(s.n) * hw_in; ++q)
      for (int ch = 0; ch < s.c_in; ++ch) dxr[q * s.c_in + ch] = dxp[q * cp + ch];
    EXPECT_LT(rel_l2(to_nchw(dxr, s.n, s.c_in, hw_in), dx), kBf16);

    // A stride-2 first layer of up to 4 channels, as GpuNet runs it: 2x2 pixel blocks, a half-size
    // kernel of stride 1, or each output pixel's window, a 1x1 kernel; a stride-1 one (a gray or
    // colour 3x3 layer) as windows; the weight copy rearranged to match (no input gradient).
    if (s.stride > 2 || s.c_in > 4 || s.groups != 1 || s.kh < 2) continue;
    for (const InputFold fold : {InputFold::blocks, InputFold::patches}) {
      const bool blocks = fold == InputFold::blocks;
      if (blocks && s.stride != 2) continue;
      const gpu::InputLayout l = blocks ? gpu::space_to_depth_input(s.c_in, s.h_in, s.w_in, s.kh, s.pad)
                                        : gpu::patches_input(s.c_in, s.h_in, s.w_in, s.kh, s.pad, s.stride);
      const int kb = blocks ? (s.kh + 1) / 2 : 1;
      gpu::ConvPlan splan(ctx, s, false, l.c_stored, fold);
      const size_t sw = size_t(s.c_out) * kb * kb * l.c_stored, sat = w.size() + 3;
      std::vector<gpu::WeightSegment> sseg{{0, w.size(), c, rs, sat, l.c_stored, fold, s.kh}};
      gpu::DeviceBuffer<gpu::WeightSegment> gsseg(1);
      gsseg.upload(sseg.data(), 1);
      auto gsw = up_bf16(std::vector<float>(sat + sw, 0.f));
      gpu::refresh_weight_copy(ctx, w.size(), gw32.get(), {gsw.get(), gsseg.get(), 1});
      const auto scopy = down_bf16(ctx, gsw);
      // Every weight once in its block tap and channel, or its window channel, zeros elsewhere.
      std::vector<float> sexp(sw, 0.f);
      for (int o = 0; o < s.c_out; ++o)
        for (int ch = 0; ch < c; ++ch)
          for (int ky = 0; ky < s.kh; ++ky)
            for (int kx = 0; kx < s.kw; ++kx)
              sexp[blocks ? ((size_t(o) * kb + ky / 2) * kb + kx / 2) * l.c_stored + ((ky % 2) * 2 + kx % 2) * c + ch
                          : size_t(o) * l.c_stored + (ky * s.kw + kx) * c + ch] =
                  wr[((size_t(o) * c + ch) * s.kh + ky) * s.kw + kx];
      ASSERT_EQ(std::vector<float>(scopy.begin() + sat, scopy.end()), sexp) << "folded weight copy, blocks " << blocks;
      auto gxs = up_bf16(pack_input(l, s.n, to_nhwc(x, s.n, s.c_in, hw_in)));
      auto gys = poisoned_bf16(y.size()), gss = poisoned_bf16(sw);
      auto gdws = poisoned(dw.size() + 16), gdbs = poisoned(db.size());
      gpu::conv_forward(ctx, splan, gxs.get(), gsw.get() + sat, gb.get(), gys.get());
      gpu::conv_backward(ctx, splan, gxs.get(), gsw.get() + sat, gdy.get(), static_cast<gpu::bf16*>(nullptr),
                         gdws.get(), gdbs.get(), gss.get());
      EXPECT_LT(rel_l2(to_nchw(down_bf16(ctx, gys), s.n, s.c_out, hw_out), y), kBf16)
          << "folded input, blocks " << blocks << ", c_in " << s.c_in;
      const auto dws = down(ctx, gdws);
      EXPECT_LT(rel_l2(std::vector<float>(dws.begin(), dws.begin() + dw.size()), dw), kBf16) << "blocks " << blocks;
      for (size_t k = dw.size(); k < dws.size(); ++k) ASSERT_TRUE(std::isnan(dws[k])) << "dw written past its end";
      EXPECT_LT(rel_l2(down(ctx, gdbs), db), 1e-4);
    }
  }
}

TEST_F(GpuBf16, FcForwardBackward) {
  FcShape s{37, 300, 10};
  auto x = round_bf16(randn(size_t(s.n) * s.in, 5)), w = randn(s.weight_count(), 6, 0.1f), b = randn(s.out, 7);
  auto dy = randn(size_t(s.n) * s.out, 8);
  const auto wr = round_bf16(w), dyr = round_bf16(dy);
  std::vector<float> y(size_t(s.n) * s.out), dx(x.size()), dw(w.size()), db(s.out), dbr(s.out);
  convoy::fc_forward(s, x.data(), wr.data(), b.data(), y.data());
  // The products take dy rounded; the bias gradient takes it as it comes (fp32 for the logits).
  convoy::fc_backward(s, x.data(), wr.data(), dyr.data(), dx.data(), dw.data(), dbr.data());
  for (int o = 0; o < s.out; ++o)
    for (int i = 0; i < s.n; ++i) db[o] += dy[size_t(i) * s.out + o];
  auto gx = up_bf16(x), gw = up_bf16(w), gdy = up_bf16(dy);
  auto gb = up(b), gdy32 = up(dy);
  auto gscratch = poisoned_bf16(dy.size());
  // bf16 output, bf16 gradient: a hidden layer.
  auto gy = poisoned_bf16(y.size()), gdx = poisoned_bf16(dx.size());
  auto gdw = poisoned(dw.size()), gdb = poisoned(db.size());
  gpu::fc_forward(ctx, s, gx.get(), gw.get(), gb.get(), gy.get());
  gpu::fc_backward(ctx, s, gx.get(), gw.get(), gdy.get(), gdx.get(), gdw.get(), gdb.get(), gscratch.get());
  EXPECT_LT(rel_l2(down_bf16(ctx, gy), y), kBf16);
  EXPECT_LT(rel_l2(down_bf16(ctx, gdx), dx), kBf16);
  EXPECT_LT(rel_l2(down(ctx, gdw), dw), 1e-4);
  EXPECT_LT(rel_l2(down(ctx, gdb), dbr), 1e-4);
  // fp32 output and gradient: the logits.
  auto gy32 = poisoned(y.size());
  auto gdx2 = poisoned_bf16(dx.size());
  auto gdw2 = poisoned(dw.size()), gdb2 = poisoned(db.size());
  gpu::fc_forward(ctx, s, gx.get(), gw.get(), gb.get(), gy32.get());
  gpu::fc_backward(ctx, s, gx.get(), gw.get(), gdy32.get(), gdx2.get(), gdw2.get(), gdb2.get(), gscratch.get());
  EXPECT_LT(rel_l2(down(ctx, gy32), y), 1e-4);
  EXPECT_LT(rel_l2(down_bf16(ctx, gdx2), dx), kBf16);
  EXPECT_LT(rel_l2(down(ctx, gdw2), dw), 1e-4);
  EXPECT_LT(rel_l2(down(ctx, gdb2), db), 1e-4);
  EXPECT_EQ(down_bf16(ctx, gscratch), dyr);
}

TEST_F(GpuBf16, Pooling) {
  // The last five have whole 16-byte packs of channels: the packed NHWC kernels (the backward pass
  // by 2x2 input blocks for stride 2, odd sizes and rows no window covers among them, and by
  // input pixel for stride 1).
  for (PoolShape s :
       {PoolShape{3, 5, 28, 28, 2, 2, 2, 0}, PoolShape{2, 4, 15, 17, 3, 3, 2, 1}, PoolShape{2, 3, 9, 9, 3, 3, 1, 1},
        PoolShape{2, 16, 15, 17, 3, 3, 2, 1}, PoolShape{3, 8, 12, 12, 2, 2, 2, 0}, PoolShape{2, 16, 14, 13, 3, 3, 2, 0},
        PoolShape{2, 8, 11, 10, 2, 2, 2, 0}, PoolShape{2, 8, 9, 9, 3, 3, 1, 1}}) {
    const int hw_in = s.h_in * s.w_in, hw_out = s.h_out() * s.w_out();
    auto x = round_bf16(randn(s.in_count(), 9)), dy = round_bf16(randn(s.out_count(), 10));
    std::vector<float> y(s.out_count()), dx(s.in_count()), ya(s.out_count()), dxa(s.in_count());
    std::vector<int32_t> am(s.out_count());
    convoy::max_pool_forward(s, x.data(), y.data(), am.data());
    convoy::max_pool_backward(s, dy.data(), am.data(), dx.data());
    convoy::avg_pool_forward(s, x.data(), ya.data());
    convoy::avg_pool_backward(s, dy.data(), dxa.data());
    auto gx = up_bf16(to_nhwc(x, s.n, s.c, hw_in)), gdy = up_bf16(to_nhwc(dy, s.n, s.c, hw_out));
    auto gy = poisoned_bf16(y.size()), gdx = poisoned_bf16(dx.size()), gya = poisoned_bf16(y.size()),
         gdxa = poisoned_bf16(dx.size());
    gpu::DeviceBuffer<int32_t> gam(am.size());
    const auto nhwc = gpu::Layout::nhwc;
    gpu::max_pool_forward(ctx, s, gx.get(), gy.get(), gam.get(), nhwc);
    gpu::max_pool_backward(ctx, s, gdy.get(), gam.get(), gdx.get(), nhwc);
    gpu::avg_pool_forward(ctx, s, gx.get(), gya.get(), nhwc);
    gpu::avg_pool_backward(ctx, s, gdy.get(), gdxa.get(), nhwc);
    EXPECT_EQ(to_nchw(down(ctx, gam), s.n, s.c, hw_out), am);
    // The maximum is one of the inputs, and each input's gradient one sum: both exact.
    EXPECT_EQ(to_nchw(down_bf16(ctx, gy), s.n, s.c, hw_out), y);
    EXPECT_EQ(to_nchw(down_bf16(ctx, gdx), s.n, s.c, hw_in), round_bf16(dx));
    EXPECT_LT(rel_l2(to_nchw(down_bf16(ctx, gya), s.n, s.c, hw_out), ya), kBf16);
    EXPECT_LT(rel_l2(to_nchw(down_bf16(ctx, gdxa), s.n, s.c, hw_in), dxa), kBf16);
  }
  // Max pooling in ceil mode (GoogLeNet's), by the packed kernels (the backward pass by 2x2 blocks
  // at stride 2, by pixel at stride 1) and the plain ones.
  for (PoolShape s : {PoolShape{2, 16, 16, 15, 3, 3, 2, 0, true}, PoolShape{2, 8, 14, 13, 2, 2, 2, 0, true},
                      PoolShape{2, 16, 9, 8, 3, 3, 1, 1, true}, PoolShape{2, 5, 10, 9, 3, 3, 2, 1, true}}) {
    const int hw_in = s.h_in * s.w_in, hw_out = s.h_out() * s.w_out();
    auto x = round_bf16(randn(s.in_count(), 19)), dy = round_bf16(randn(s.out_count(), 20));
    std::vector<float> y(s.out_count()), dx(s.in_count());
    std::vector<int32_t> am(s.out_count());
    convoy::max_pool_forward(s, x.data(), y.data(), am.data());
    convoy::max_pool_backward(s, dy.data(), am.data(), dx.data());
    auto gx = up_bf16(to_nhwc(x, s.n, s.c, hw_in)), gdy = up_bf16(to_nhwc(dy, s.n, s.c, hw_out));
    auto gy = poisoned_bf16(y.size()), gdx = poisoned_bf16(dx.size());
    gpu::DeviceBuffer<int32_t> gam(am.size());
    gpu::max_pool_forward(ctx, s, gx.get(), gy.get(), gam.get(), gpu::Layout::nhwc);
    gpu::max_pool_backward(ctx, s, gdy.get(), gam.get(), gdx.get(), gpu::Layout::nhwc);
    EXPECT_EQ(to_nchw(down(ctx, gam), s.n, s.c, hw_out), am)
        << "ceil mode, c " << s.c << " k" << s.kh << " s" << s.stride;
    EXPECT_EQ(to_nchw(down_bf16(ctx, gy), s.n, s.c, hw_out), y);
    EXPECT_EQ(to_nchw(down_bf16(ctx, gdx), s.n, s.c, hw_in), round_bf16(dx));
  }
  const int n = 3, c = 7, hw = 49;
  auto x = round_bf16(randn(size_t(n) * c * hw, 11)), dy = round_bf16(randn(size_t(n) * c, 12));
  std::vector<float> y(n * c), dx(x.size());
  convoy::global_avg_pool_forward(n, c, hw, x.data(), y.data());
  convoy::global_avg_pool_backward(n, c, hw, dy.data(), dx.data());
  auto gx = up_bf16(to_nhwc(x, n, c, hw)), gdy = up_bf16(dy), gy = poisoned_bf16(y.size()),
       gdx = poisoned_bf16(dx.size());
  gpu::global_avg_pool_forward(ctx, n, c, hw, gx.get(), gy.get(), gpu::Layout::nhwc);
  gpu::global_avg_pool_backward(ctx, n, c, hw, gdy.get(), gdx.get(), gpu::Layout::nhwc);
  EXPECT_LT(rel_l2(down_bf16(ctx, gy), y), kBf16);
  EXPECT_EQ(to_nchw(down_bf16(ctx, gdx), n, c, hw), round_bf16(dx));
}

TEST_F(GpuBf16, ElementwiseOps) {
  const size_t n = 100003;
  auto a = round_bf16(randn(n, 13)), b = round_bf16(randn(n, 14)), dy = round_bf16(randn(n, 15));
  std::vector<float> y(n), dx(n), s(n), acc = b;
  convoy::relu_forward(n, a.data(), y.data());
  convoy::relu_backward(n, y.data(), dy.data(), dx.data());
  convoy::add_forward(n, a.data(), b.data(), s.data());
  convoy::accumulate(n, a.data(), acc.data());
  auto ga = up_bf16(a), gb = up_bf16(b), gdy = up_bf16(dy), gacc = up_bf16(b);
  auto gy = poisoned_bf16(n), gdx = poisoned_bf16(n), gs = poisoned_bf16(n);
  gpu::relu_forward(ctx, n, ga.get(), gy.get());
  gpu::relu_backward(ctx, n, gy.get(), gdy.get(), gdx.get());
  gpu::add_forward(ctx, n, ga.get(), gb.get(), gs.get());
  gpu::accumulate(ctx, n, ga.get(), gacc.get());
  EXPECT_EQ(down_bf16(ctx, gy), y);
  EXPECT_EQ(down_bf16(ctx, gdx), dx);
  EXPECT_EQ(down_bf16(ctx, gs), round_bf16(s));
  EXPECT_EQ(down_bf16(ctx, gacc), round_bf16(acc));
  // ReLU6: exact in bf16 too (6 is a bf16 value).
  auto x6 = round_bf16(randn(n, 16, 5.f));
  std::vector<float> y6(n), dx6(n);
  convoy::relu6_forward(n, x6.data(), y6.data());
  convoy::relu6_backward(n, y6.data(), dy.data(), dx6.data());
  auto gx6 = up_bf16(x6), gy6 = poisoned_bf16(n), gdx6 = poisoned_bf16(n);
  gpu::relu6_forward(ctx, n, gx6.get(), gy6.get());
  gpu::relu6_backward(ctx, n, gy6.get(), gdy.get(), gdx6.get());
  EXPECT_EQ(down_bf16(ctx, gy6), y6);
  EXPECT_EQ(down_bf16(ctx, gdx6), dx6);
}

// The same in NHWC: the 8- and 16-channel inputs' slices (whole 16-byte packs at offsets of 0 and 8
// channels) move in packs, the 3- and 5-channel ones a value at a time; bit for bit against the
// CPU's NCHW concat of the same values, the sums rounded once.
TEST_F(GpuBf16, ConcatEqualsCpu) {
  const std::vector<int> cs = {8, 16, 3, 5};
  const Node nd = concat_node(cs, 5, 7);
  const int n = 3, hw = 35, total = nd.out.c;
  auto dy = round_bf16(randn(size_t(n) * nd.out.size(), 50));
  std::vector<float> y(dy.size(), NAN);
  auto gdy = up_bf16(to_nhwc(dy, n, total, hw)), gy = poisoned_bf16(y.size());
  std::vector<gpu::DeviceBuffer<gpu::bf16>> gx;
  for (size_t k = 0; k < cs.size(); ++k) {
    const auto x = round_bf16(randn(size_t(n) * nd.in_dims[k].size(), 51 + uint32_t(k)));
    convoy::concat_forward(concat_slice(nd, int(k), n), x.data(), y.data());
    gx.push_back(up_bf16(to_nhwc(x, n, cs[k], hw)));
    gpu::concat_forward(ctx, concat_slice(nd, int(k), n, true), gx[k].get(), gy.get());
  }
  EXPECT_EQ(to_nchw(down_bf16(ctx, gy), n, total, hw), y);
  for (size_t k = 0; k < cs.size(); ++k) {
    const ConcatSlice sl = concat_slice(nd, int(k), n, true);
    std::vector<float> dx(size_t(n) * nd.in_dims[k].size()), held = round_bf16(randn(dx.size(), 60 + uint32_t(k)));
    convoy::concat_backward(concat_slice(nd, int(k), n), dy.data(), dx.data());
    auto gdx = poisoned_bf16(dx.size()), gsum = up_bf16(to_nhwc(held, n, cs[k], hw));
    gpu::concat_backward(ctx, sl, gdy.get(), gdx.get());
    gpu::concat_backward(ctx, sl, gdy.get(), gsum.get(), true);
    EXPECT_EQ(to_nchw(down_bf16(ctx, gdx), n, cs[k], hw), dx) << "input " << k;
    for (size_t i = 0; i < dx.size(); ++i) held[i] += dx[i];
    EXPECT_EQ(to_nchw(down_bf16(ctx, gsum), n, cs[k], hw), round_bf16(held)) << "input " << k << ", added";
  }
}

TEST_F(GpuBf16, DropoutMaskEqualsCpu) {
  DropoutShape s{16, 257, 0.3f};
  std::vector<uint64_t> keys(s.n);
  for (int i = 0; i < s.n; ++i) keys[i] = 1000003ull * i + 17;
  auto x = round_bf16(randn(size_t(s.n) * s.per_sample, 16)), dy = round_bf16(randn(x.size(), 17));
  std::vector<float> y(x.size()), mask(x.size()), dx(x.size());
  convoy::dropout_forward(s, 42, keys.data(), x.data(), y.data(), mask.data());
  convoy::dropout_backward(s, mask.data(), dy.data(), dx.data());
  auto gkeys = up(keys);
  auto gx = up_bf16(x), gdy = up_bf16(dy), gy = poisoned_bf16(x.size()), gmask = poisoned_bf16(x.size()),
       gdx = poisoned_bf16(x.size());
  auto gkey = up(std::vector<uint64_t>{40});
  gpu::dropout_forward(ctx, s, gkey.get(), 2, gkeys.get(), gx.get(), gy.get(), gmask.get());
  gpu::dropout_backward(ctx, s, gmask.get(), gdy.get(), gdx.get());
  EXPECT_EQ(down_bf16(ctx, gmask), round_bf16(mask));
  EXPECT_EQ(down_bf16(ctx, gy), round_bf16(y));
  EXPECT_EQ(down_bf16(ctx, gdx), round_bf16(dx));
}

TEST_F(GpuBf16, SoftmaxCrossEntropy) {
  for (float eps : {0.f, 0.1f}) {
    SCOPED_TRACE("label smoothing " + std::to_string(eps));
    const int n = 50, classes = 10;
    auto logits = round_bf16(randn(size_t(n) * classes, 18, 3.f));
    std::vector<int> labels(n);
    for (int i = 0; i < n; ++i) labels[i] = (i * 7) % classes;
    std::vector<float> probs(logits.size()), loss(n), dl(logits.size());
    convoy::softmax_xent_forward(n, classes, logits.data(), labels.data(), probs.data(), loss.data(), eps);
    convoy::softmax_xent_backward(n, classes, probs.data(), labels.data(), 1.f / n, dl.data(), eps);
    auto glab = up(labels);
    auto gl = up_bf16(logits), gdl = poisoned_bf16(dl.size());
    auto gp = poisoned(probs.size()), gloss = poisoned(n);
    gpu::softmax_xent_forward(ctx, n, classes, gl.get(), glab.get(), gp.get(), gloss.get(), eps);
    gpu::softmax_xent_backward(ctx, n, classes, gp.get(), glab.get(), 1.f / n, gdl.get(), eps);
    EXPECT_LT(rel_err(down(ctx, gp), probs), 1e-5);
    EXPECT_LT(rel_err(down(ctx, gloss), loss), 1e-5);
    EXPECT_LT(rel_l2(down_bf16(ctx, gdl), dl), kBf16);
  }
}

TEST_F(GpuBf16, BatchNorm) {
  // The last three split their sums over many row ranges and a partial channel tile; c % 8 == 0
  // takes the kernels over 16-byte packs of channels.
  for (BnShape s :
       {BnShape{8, 6, 25}, BnShape{32, 20, 1}, BnShape{64, 40, 100}, BnShape{16, 64, 49}, BnShape{16, 72, 49}}) {
    const size_t count = size_t(s.n) * s.c * s.hw;
    auto x = round_bf16(randn(count, 19, 2.f)), dy = round_bf16(randn(count, 20));
    for (size_t i = 0; i < count; ++i) x[i] = round_bf16(x[i] + 3.f);  // an offset mean, as after a ReLU
    auto gamma = randn(s.c, 21), beta = randn(s.c, 22);
    std::vector<float> y(count), ye(count), dx(count), dg(s.c), dbeta(s.c), mean(s.c), invstd(s.c);
    std::vector<float> rmean(s.c, 0.1f), rvar(s.c, 0.9f);
    convoy::bn_forward_train(s, x.data(), gamma.data(), beta.data(), y.data(), mean.data(), invstd.data(), rmean.data(),
                             rvar.data());
    convoy::bn_forward_eval(s, x.data(), gamma.data(), beta.data(), rmean.data(), rvar.data(), ye.data());
    convoy::bn_backward(s, x.data(), dy.data(), gamma.data(), mean.data(), invstd.data(), dx.data(), dg.data(),
                        dbeta.data());
    auto gx = up_bf16(to_nhwc(x, s.n, s.c, s.hw)), gdy = up_bf16(to_nhwc(dy, s.n, s.c, s.hw));
    auto gg = up(gamma), gbeta = up(beta);
    auto grm = up(std::vector<float>(s.c, 0.1f)), grv = up(std::vector<float>(s.c, 0.9f));
    auto gy = poisoned_bf16(count), gye = poisoned_bf16(count), gdx = poisoned_bf16(count);
    auto gdg = poisoned(s.c), gdb = poisoned(s.c), gmean = poisoned(s.c), ginv = poisoned(s.c);
    gpu::bn_forward_train(ctx, s, gx.get(), gg.get(), gbeta.get(), gy.get(), gmean.get(), ginv.get(), grm.get(),
                          grv.get());
    gpu::bn_forward_eval(ctx, s, gx.get(), gg.get(), gbeta.get(), grm.get(), grv.get(), gye.get());
    gpu::bn_backward(ctx, s, gx.get(), gdy.get(), gg.get(), gmean.get(), ginv.get(), gdx.get(), gdg.get(), gdb.get());
    EXPECT_LT(rel_l2(to_nchw(down_bf16(ctx, gy), s.n, s.c, s.hw), y), kBf16) << s.n << "x" << s.c << "x" << s.hw;
    EXPECT_LT(rel_err(down(ctx, gmean), mean), 1e-4);
    EXPECT_LT(rel_err(down(ctx, ginv), invstd), 1e-4);
    EXPECT_LT(rel_err(down(ctx, grm), rmean), 1e-4);
    EXPECT_LT(rel_err(down(ctx, grv), rvar), 1e-4);
    EXPECT_LT(rel_l2(to_nchw(down_bf16(ctx, gye), s.n, s.c, s.hw), ye), kBf16);
    EXPECT_LT(rel_l2(to_nchw(down_bf16(ctx, gdx), s.n, s.c, s.hw), dx), kBf16);
    EXPECT_LT(rel_err(down(ctx, gdg), dg), 1e-4);
    EXPECT_LT(rel_err(down(ctx, gdb), dbeta), 1e-4);
    // The first layer asks for no input gradient.
    auto gdg2 = poisoned(s.c), gdb2 = poisoned(s.c);
    gpu::bn_backward(ctx, s, gx.get(), gdy.get(), gg.get(), gmean.get(), ginv.get(), nullptr, gdg2.get(), gdb2.get());
    EXPECT_EQ(down(ctx, gdg2), down(ctx, gdg));
    EXPECT_EQ(down(ctx, gdb2), down(ctx, gdb));
  }
}

// Batch norm with its ReLU in one pass equals the two ops run apart, bit for bit, forward and
// backward, on packed and unpacked channel counts.
TEST_F(GpuBf16, BatchNormFusedReluEqualsSeparateOps) {
  for (BnShape s : {BnShape{8, 6, 25}, BnShape{16, 64, 49}}) {
    const size_t count = size_t(s.n) * s.c * s.hw;
    auto gx = up_bf16(round_bf16(randn(count, 23, 2.f))), gdy = up_bf16(round_bf16(randn(count, 24)));
    auto gg = up(randn(s.c, 25)), gbeta = up(randn(s.c, 26));
    auto grm = up(std::vector<float>(s.c, 0.f)), grv = up(std::vector<float>(s.c, 1.f));
    auto gmean = poisoned(s.c), ginv = poisoned(s.c);
    // Apart: batch norm, ReLU, the ReLU's backward, batch norm's backward.
    auto gy = poisoned_bf16(count), gr = poisoned_bf16(count), gg_in = poisoned_bf16(count), gdx = poisoned_bf16(count);
    auto gdg = poisoned(s.c), gdb = poisoned(s.c);
    gpu::bn_forward_train(ctx, s, gx.get(), gg.get(), gbeta.get(), gy.get(), gmean.get(), ginv.get(), grm.get(),
                          grv.get());
    gpu::relu_forward(ctx, count, gy.get(), gr.get());
    gpu::relu_backward(ctx, count, gr.get(), gdy.get(), gg_in.get());
    gpu::bn_backward(ctx, s, gx.get(), gg_in.get(), gg.get(), gmean.get(), ginv.get(), gdx.get(), gdg.get(), gdb.get());
    // Fused.
    auto gmean2 = poisoned(s.c), ginv2 = poisoned(s.c);
    auto gr2 = poisoned_bf16(count), gdx2 = poisoned_bf16(count), gre = poisoned_bf16(count),
         gye = poisoned_bf16(count);
    auto gdg2 = poisoned(s.c), gdb2 = poisoned(s.c);
    gpu::bn_forward_train(ctx, s, gx.get(), gg.get(), gbeta.get(), gr2.get(), gmean2.get(), ginv2.get(), grm.get(),
                          grv.get(), true);
    gpu::bn_backward(ctx, s, gx.get(), gdy.get(), gg.get(), gmean2.get(), ginv2.get(), gdx2.get(), gdg2.get(),
                     gdb2.get(), gr2.get());
    gpu::bn_forward_eval(ctx, s, gx.get(), gg.get(), gbeta.get(), grm.get(), grv.get(), gye.get());
    gpu::relu_forward(ctx, count, gye.get(), gye.get());
    gpu::bn_forward_eval(ctx, s, gx.get(), gg.get(), gbeta.get(), grm.get(), grv.get(), gre.get(), true);
    const auto r = down_bf16(ctx, gr);
    EXPECT_EQ(down_bf16(ctx, gr2), r);
    EXPECT_EQ(down_bf16(ctx, gdx2), down_bf16(ctx, gdx));
    EXPECT_EQ(down(ctx, gdg2), down(ctx, gdg));
    EXPECT_EQ(down(ctx, gdb2), down(ctx, gdb));
    EXPECT_EQ(down_bf16(ctx, gre), down_bf16(ctx, gye));
    EXPECT_GT(std::count(r.begin(), r.end(), 0.f), 0);  // the ReLU did cut
  }
}

// A residual add whose inputs batch norms left as scale and shift (one, the other or both) equals
// the batch norms' own passes and then the add, with or without its ReLU, bit for bit, in training
// and evaluation, on packed and unpacked channel counts.
TEST_F(GpuBf16, AddOfDeferredBatchNormsEqualsSeparateOps) {
  for (BnShape s : {BnShape{8, 6, 25}, BnShape{16, 64, 49}}) {
    const size_t count = size_t(s.n) * s.c * s.hw;
    auto ga = up_bf16(round_bf16(randn(count, 33, 2.f))), gb = up_bf16(round_bf16(randn(count, 34)));
    auto gsc = up_bf16(round_bf16(randn(count, 35)));
    auto gg = up(randn(s.c, 36)), gbeta = up(randn(s.c, 37));
    auto grm = up(randn(s.c, 38, 0.1f)), grv = up(std::vector<float>(s.c, 1.5f));
    for (bool train : {true, false}) {
      // Apart: each batch norm's output stored, then added.
      auto ya = poisoned_bf16(count), yb = poisoned_bf16(count);
      auto stats = poisoned(4 * s.c), run = up(std::vector<float>(4 * s.c, 1.f));
      if (train) {
        gpu::bn_forward_train(ctx, s, ga.get(), gg.get(), gbeta.get(), ya.get(), stats.get(), stats.get() + s.c,
                              run.get(), run.get() + s.c);
        gpu::bn_forward_train(ctx, s, gb.get(), gg.get(), gbeta.get(), yb.get(), stats.get() + 2 * s.c,
                              stats.get() + 3 * s.c, run.get() + 2 * s.c, run.get() + 3 * s.c);
      } else {
        gpu::bn_forward_eval(ctx, s, ga.get(), gg.get(), gbeta.get(), grm.get(), grv.get(), ya.get());
        gpu::bn_forward_eval(ctx, s, gb.get(), gg.get(), gbeta.get(), grm.get(), grv.get(), yb.get());
      }
      // Left as scale and shift.
      gpu::DeviceBuffer<float2> ssa(s.c), ssb(s.c);
      auto stats2 = poisoned(4 * s.c), run2 = up(std::vector<float>(4 * s.c, 1.f));
      if (train) {
        gpu::bn_scale_shift_train(ctx, s, ga.get(), gg.get(), gbeta.get(), stats2.get(), stats2.get() + s.c, run2.get(),
                                  run2.get() + s.c, ssa.get());
        gpu::bn_scale_shift_train(ctx, s, gb.get(), gg.get(), gbeta.get(), stats2.get() + 2 * s.c,
                                  stats2.get() + 3 * s.c, run2.get() + 2 * s.c, run2.get() + 3 * s.c, ssb.get());
        EXPECT_EQ(down(ctx, stats2), down(ctx, stats));
        EXPECT_EQ(down(ctx, run2), down(ctx, run));
      } else {
        gpu::bn_scale_shift_eval(ctx, s, gg.get(), gbeta.get(), grm.get(), grv.get(), ssa.get());
        gpu::bn_scale_shift_eval(ctx, s, gg.get(), gbeta.get(), grm.get(), grv.get(), ssb.get());
      }
      const gpu::ChannelAffine a{ga.get(), ssa.get()}, b{gb.get(), ssb.get()}, sc{gsc.get()};
      for (bool relu : {true, false}) {
        auto want_a = poisoned_bf16(count), want_b = poisoned_bf16(count), want_ab = poisoned_bf16(count);
        auto add = [&](const gpu::bf16* u, const gpu::bf16* v, gpu::bf16* y) {
          relu ? gpu::add_relu_forward(ctx, count, u, v, y) : gpu::add_forward(ctx, count, u, v, y);
        };
        add(ya.get(), gsc.get(), want_a.get());
        add(gsc.get(), yb.get(), want_b.get());
        add(ya.get(), yb.get(), want_ab.get());
        auto got_a = poisoned_bf16(count), got_b = poisoned_bf16(count), got_ab = poisoned_bf16(count);
        gpu::add_affine_forward(ctx, count, s.c, a, sc, got_a.get(), relu);
        gpu::add_affine_forward(ctx, count, s.c, sc, b, got_b.get(), relu);
        gpu::add_affine_forward(ctx, count, s.c, a, b, got_ab.get(), relu);
        EXPECT_EQ(down_bf16(ctx, got_a), down_bf16(ctx, want_a)) << "train " << train << " relu " << relu;
        EXPECT_EQ(down_bf16(ctx, got_b), down_bf16(ctx, want_b)) << "train " << train << " relu " << relu;
        EXPECT_EQ(down_bf16(ctx, got_ab), down_bf16(ctx, want_ab)) << "train " << train << " relu " << relu;
      }
    }
  }
}

// An add with its ReLU that writes its input gradient once and takes the gradient sums of the
// deferred batch norms it feeds (one or both inputs; with and without a second gradient part)
// gives the same gradient and, after each batch norm's backward pass, the same parameter and input
// gradients as writing both gradients and summing them in batch norm's own pass, bit for bit.
TEST_F(GpuBf16, AddTakingBatchNormGradientSumsEqualsSeparateOps) {
  for (BnShape s : {BnShape{16, 64, 49}, BnShape{3, 256, 7}}) {
    const size_t count = size_t(s.n) * s.c * s.hw;
    const long long rows = (long long)s.n * s.hw;
    auto gxa = up_bf16(round_bf16(randn(count, 50, 2.f))), gxb = up_bf16(round_bf16(randn(count, 51)));
    auto gy = up_bf16(round_bf16(randn(count, 52))), gdy = up_bf16(round_bf16(randn(count, 53)));
    auto gdy2 = up_bf16(round_bf16(randn(count, 54)));
    auto gg = up(randn(s.c, 55)), gbeta = up(randn(s.c, 56));
    auto stats = poisoned(4 * s.c), run = up(std::vector<float>(4 * s.c, 1.f));
    gpu::DeviceBuffer<float2> ss(s.c);
    gpu::bn_scale_shift_train(ctx, s, gxa.get(), gg.get(), gbeta.get(), stats.get(), stats.get() + s.c, run.get(),
                              run.get() + s.c, ss.get());
    gpu::bn_scale_shift_train(ctx, s, gxb.get(), gg.get(), gbeta.get(), stats.get() + 2 * s.c, stats.get() + 3 * s.c,
                              run.get() + 2 * s.c, run.get() + 3 * s.c, ss.get());
    const float* mean_a = stats.get();
    const float* mean_b = stats.get() + 2 * s.c;
    const gpu::bf16* xs[2] = {gxa.get(), gxb.get()};
    const float* means[2] = {mean_a, mean_b};
    for (int sets : {1, 2})
      for (bool second_part : {false, true}) {
        const gpu::bf16* dy2 = second_part ? gdy2.get() : nullptr;
        auto da = poisoned_bf16(count), db = poisoned_bf16(count);
        gpu::add_relu_backward(ctx, count, gy.get(), gdy.get(), da.get(), false, db.get(), false, dy2);
        auto d = poisoned_bf16(count);
        const size_t part_count = size_t(gpu::channels::parts(rows)) * s.c;
        gpu::DeviceBuffer<float2> part_a(part_count), part_b(part_count);
        const gpu::BnGradSums a{gxa.get(), mean_a, mean_a + s.c, part_a.get()};
        const gpu::BnGradSums b = sets == 2 ? gpu::BnGradSums{gxb.get(), mean_b, mean_b + s.c, part_b.get()}
                                            : gpu::BnGradSums{};
        gpu::add_relu_backward_sums(ctx, rows, s.c, gy.get(), gdy.get(), dy2, d.get(), a, b);
        const std::string what = "c " + std::to_string(s.c) + " sets " + std::to_string(sets) + " dy2 " +
                                 std::to_string(second_part);
        EXPECT_EQ(down_bf16(ctx, d), down_bf16(ctx, da)) << what;
        float2* parts[2] = {part_a.get(), part_b.get()};
        for (int k = 0; k < sets; ++k) {
          auto want_dx = poisoned_bf16(count), got_dx = poisoned_bf16(count);
          auto want_p = poisoned(2 * s.c), got_p = poisoned(2 * s.c);
          const gpu::bf16* want_dy = k == 0 ? da.get() : db.get();
          gpu::bn_backward(ctx, s, xs[k], want_dy, gg.get(), means[k], means[k] + s.c, want_dx.get(), want_p.get(),
                           want_p.get() + s.c);
          gpu::bn_backward(ctx, s, xs[k], d.get(), gg.get(), means[k], means[k] + s.c, got_dx.get(), got_p.get(),
                           got_p.get() + s.c, nullptr, nullptr, parts[k]);
          EXPECT_EQ(down(ctx, got_p), down(ctx, want_p)) << what << " input " << k;
          EXPECT_EQ(down_bf16(ctx, got_dx), down_bf16(ctx, want_dx)) << what << " input " << k;
        }
      }
  }
}

// A fused ReLU's output signs kept as bits (a byte per 16-byte pack): batch norm's and the residual
// add's forward passes write the same outputs and the bits of their signs, and every backward pass
// that reads the bits gives the same gradients as reading the output, bit for bit.
TEST_F(GpuBf16, ReluSignsAsBitsEqualReadingTheOutput) {
  const BnShape s{8, 32, 25};
  const size_t count = size_t(s.n) * s.c * s.hw, packs = count / 8;
  const long long rows = (long long)s.n * s.hw;
  auto gx = up_bf16(round_bf16(randn(count, 60, 2.f))), gz = up_bf16(round_bf16(randn(count, 61)));
  auto gdy = up_bf16(round_bf16(randn(count, 62))), gdy2 = up_bf16(round_bf16(randn(count, 63)));
  auto gg = up(randn(s.c, 64)), gbeta = up(randn(s.c, 65));
  auto stats = poisoned(2 * s.c), run = up(std::vector<float>(2 * s.c, 1.f));
  gpu::DeviceBuffer<float2> ss(s.c);
  gpu::bn_scale_shift_train(ctx, s, gx.get(), gg.get(), gbeta.get(), stats.get(), stats.get() + s.c, run.get(),
                            run.get() + s.c, ss.get());
  auto check_bits = [&](const gpu::DeviceBuffer<uint8_t>& bits, const std::vector<float>& y, const char* what) {
    const std::vector<uint8_t> b = down(ctx, bits);
    size_t wrong = 0, set = 0;
    for (size_t k = 0; k < packs; ++k)
      for (int j = 0; j < 8; ++j) {
        const bool bit = b[k] >> j & 1, pos = y[8 * k + j] > 0.f;
        wrong += bit != pos, set += bit;
      }
    EXPECT_EQ(wrong, 0u) << what;
    EXPECT_GT(set, 0u) << what;
    EXPECT_LT(set, count) << what;
  };
  // Batch norm with its ReLU.
  auto y0 = poisoned_bf16(count), y1 = poisoned_bf16(count);
  gpu::DeviceBuffer<uint8_t> bn_bits(packs);
  gpu::bn_apply(ctx, s, gx.get(), ss.get(), y0.get(), true);
  gpu::bn_apply(ctx, s, gx.get(), ss.get(), y1.get(), true, bn_bits.get());
  const std::vector<float> y = down_bf16(ctx, y0);
  EXPECT_EQ(down_bf16(ctx, y1), y);
  check_bits(bn_bits, y, "batch norm");
  auto dx0 = poisoned_bf16(count), dx1 = poisoned_bf16(count);
  auto p0 = poisoned(2 * s.c), p1 = poisoned(2 * s.c);
  gpu::bn_backward(ctx, s, gx.get(), gdy.get(), gg.get(), stats.get(), stats.get() + s.c, dx0.get(), p0.get(),
                   p0.get() + s.c, y0.get());
  gpu::bn_backward(ctx, s, gx.get(), gdy.get(), gg.get(), stats.get(), stats.get() + s.c, dx1.get(), p1.get(),
                   p1.get() + s.c, y0.get(), bn_bits.get());
  EXPECT_EQ(down_bf16(ctx, dx1), down_bf16(ctx, dx0));
  EXPECT_EQ(down(ctx, p1), down(ctx, p0));
  // The residual add with its ReLU, both inputs plain.
  auto a0 = poisoned_bf16(count), a1 = poisoned_bf16(count);
  gpu::DeviceBuffer<uint8_t> add_bits(packs);
  gpu::add_relu_forward(ctx, count, gx.get(), gz.get(), a0.get());
  gpu::add_affine_forward(ctx, count, s.c, gpu::ChannelAffine{gx.get()}, gpu::ChannelAffine{gz.get()}, a1.get(), true,
                          add_bits.get());
  const std::vector<float> a = down_bf16(ctx, a0);
  EXPECT_EQ(down_bf16(ctx, a1), a);
  check_bits(add_bits, a, "add");
  auto da0 = poisoned_bf16(count), db0 = poisoned_bf16(count), da1 = poisoned_bf16(count), db1 = poisoned_bf16(count);
  gpu::add_relu_backward(ctx, count, a0.get(), gdy.get(), da0.get(), false, db0.get(), false, gdy2.get());
  gpu::add_relu_backward(ctx, count, a0.get(), gdy.get(), da1.get(), false, db1.get(), false, gdy2.get(),
                         add_bits.get());
  EXPECT_EQ(down_bf16(ctx, da1), down_bf16(ctx, da0));
  EXPECT_EQ(down_bf16(ctx, db1), down_bf16(ctx, db0));
  const size_t part_count = size_t(gpu::channels::parts(rows)) * s.c;
  gpu::DeviceBuffer<float2> q0(part_count), q1(part_count);
  auto d0 = poisoned_bf16(count), d1 = poisoned_bf16(count);
  const float* mean = stats.get();
  gpu::add_relu_backward_sums(ctx, rows, s.c, a0.get(), gdy.get(), gdy2.get(), d0.get(),
                              gpu::BnGradSums{gx.get(), mean, mean + s.c, q0.get()}, gpu::BnGradSums{});
  gpu::add_relu_backward_sums(ctx, rows, s.c, a0.get(), gdy.get(), gdy2.get(), d1.get(),
                              gpu::BnGradSums{gx.get(), mean, mean + s.c, q1.get()}, gpu::BnGradSums{}, add_bits.get());
  EXPECT_EQ(down_bf16(ctx, d1), down_bf16(ctx, d0));
  const auto sums0 = down(ctx, q0), sums1 = down(ctx, q1);
  ASSERT_EQ(sums0.size(), sums1.size());
  EXPECT_EQ(0, std::memcmp(sums0.data(), sums1.data(), sums0.size() * sizeof(float2)));
}

namespace {

// Max pooling of a batch norm's output left as scale and shift (ResNet's stem: with its ReLU)
// equals pooling the stored output, forward and, after the ReLU's mask, backward, bit for bit.
void max_pool_of_deferred_batch_norm(gpu::Context& ctx, const PoolShape& p) {
  SCOPED_TRACE("ceil mode " + std::to_string(p.ceil));
  const BnShape s{p.n, p.c, p.h_in * p.w_in};
  const size_t count = p.in_count(), out = p.out_count();
  auto gx = up_bf16(round_bf16(randn(count, 40, 2.f))), gdy = up_bf16(round_bf16(randn(out, 43)));
  auto gg = up(randn(s.c, 41)), gbeta = up(randn(s.c, 42));
  auto stats = poisoned(2 * s.c), run = up(std::vector<float>(2 * s.c, 1.f));
  gpu::DeviceBuffer<float2> ss(s.c);
  gpu::bn_scale_shift_train(ctx, s, gx.get(), gg.get(), gbeta.get(), stats.get(), stats.get() + s.c, run.get(),
                            run.get() + s.c, ss.get());
  const auto nhwc = gpu::Layout::nhwc;
  for (bool relu : {true, false}) {
    auto ybn = poisoned_bf16(count), want_y = poisoned_bf16(out), got_y = poisoned_bf16(out);
    gpu::DeviceBuffer<int32_t> want_am(out), got_am(out);
    gpu::bn_apply(ctx, s, gx.get(), ss.get(), ybn.get(), relu);
    gpu::max_pool_forward(ctx, p, ybn.get(), want_y.get(), want_am.get(), nhwc);
    gpu::max_pool_forward(ctx, p, gpu::ChannelAffine{gx.get(), ss.get(), relu}, got_y.get(), got_am.get());
    EXPECT_EQ(down_bf16(ctx, got_y), down_bf16(ctx, want_y)) << "relu " << relu;
    auto want_dx = poisoned_bf16(count), got_dx = poisoned_bf16(count);
    gpu::max_pool_backward(ctx, p, gdy.get(), want_am.get(), want_dx.get(), nhwc);
    gpu::max_pool_backward(ctx, p, gdy.get(), got_am.get(), got_dx.get(), nhwc);
    auto want = down_bf16(ctx, want_dx);
    const auto y = down_bf16(ctx, ybn);
    for (size_t k = 0; k < count; ++k)
      if (relu && !(y[k] > 0.f)) want[k] = 0.f;
    EXPECT_EQ(down_bf16(ctx, got_dx), want) << "relu " << relu;
    const auto am = down(ctx, got_am);
    const auto clipped = std::count(am.begin(), am.end(), -1);
    if (relu)
      EXPECT_GT(clipped, 0) << "no window clipped whole: the test checks less than it should";
    else
      EXPECT_EQ(clipped, 0);
  }
}

}  // namespace

TEST_F(GpuBf16, MaxPoolOfDeferredBatchNormEqualsSeparateOps) {
  // ResNet's stem pooling, and GoogLeNet's (ceil mode).
  for (const PoolShape& p : {PoolShape{4, 16, 15, 14, 3, 3, 2, 1}, PoolShape{4, 16, 16, 15, 3, 3, 2, 0, true}})
    max_pool_of_deferred_batch_norm(ctx, p);
}

// A residual add with its ReLU equals add, ReLU, the ReLU's backward and the gradient's copy or
// accumulation into each input, bit for bit.
TEST_F(GpuBf16, AddReluEqualsSeparateOps) {
  for (size_t n : {size_t(100003), size_t(4096)}) {
    auto a = round_bf16(randn(n, 27)), b = round_bf16(randn(n, 28)), dy = round_bf16(randn(n, 29)),
         old = round_bf16(randn(n, 30));
    auto ga = up_bf16(a), gb = up_bf16(b), gdy = up_bf16(dy);
    auto gs = poisoned_bf16(n), gy = poisoned_bf16(n), gg = poisoned_bf16(n), gy2 = poisoned_bf16(n);
    gpu::add_forward(ctx, n, ga.get(), gb.get(), gs.get());
    gpu::relu_forward(ctx, n, gs.get(), gy.get());
    gpu::relu_backward(ctx, n, gy.get(), gdy.get(), gg.get());
    gpu::add_relu_forward(ctx, n, ga.get(), gb.get(), gy2.get());
    EXPECT_EQ(down_bf16(ctx, gy2), down_bf16(ctx, gy));
    auto want_acc = up_bf16(old);
    gpu::accumulate(ctx, n, gg.get(), want_acc.get());
    auto d0 = poisoned_bf16(n), d1 = up_bf16(old);
    gpu::add_relu_backward(ctx, n, gy.get(), gdy.get(), d0.get(), false, d1.get(), true);
    EXPECT_EQ(down_bf16(ctx, d0), down_bf16(ctx, gg));
    EXPECT_EQ(down_bf16(ctx, d1), down_bf16(ctx, want_acc));
    auto d2 = poisoned_bf16(n);
    gpu::add_relu_backward(ctx, n, gy.get(), gdy.get(), static_cast<gpu::bf16*>(nullptr), false, d2.get(), false);
    EXPECT_EQ(down_bf16(ctx, d2), down_bf16(ctx, gg));
    // The ReLU's gradient in two parts (two consumers, each written apart): their sum, rounded
    // once, is the gradient, as if the second had been added to the first.
    auto part = up_bf16(old), summed = up_bf16(dy), gg2 = poisoned_bf16(n), d3 = poisoned_bf16(n);
    gpu::accumulate(ctx, n, part.get(), summed.get());
    gpu::relu_backward(ctx, n, gy.get(), summed.get(), gg2.get());
    gpu::add_relu_backward(ctx, n, gy.get(), gdy.get(), d3.get(), false, static_cast<gpu::bf16*>(nullptr), false,
                           part.get());
    EXPECT_EQ(down_bf16(ctx, d3), down_bf16(ctx, gg2));
  }
  // Unaligned pointers take the element-by-element kernel.
  const size_t n = 1001;
  auto ga = up_bf16(round_bf16(randn(n + 1, 31))), gdy = up_bf16(round_bf16(randn(n + 1, 32)));
  auto gy = poisoned_bf16(n + 1), gg = poisoned_bf16(n + 1), d = poisoned_bf16(n + 1);
  gpu::relu_forward(ctx, n, ga.get() + 1, gy.get() + 1);
  gpu::relu_backward(ctx, n, gy.get() + 1, gdy.get() + 1, gg.get() + 1);
  gpu::add_relu_backward(ctx, n, gy.get() + 1, gdy.get() + 1, d.get() + 1, false, static_cast<gpu::bf16*>(nullptr),
                         false);
  auto want = down_bf16(ctx, gg), got = down_bf16(ctx, d);
  EXPECT_TRUE(std::equal(want.begin() + 1, want.end(), got.begin() + 1));
}

TEST_F(GpuBf16, NormalizeEqualsCpuRounded) {
  AugmentSpec spec;
  spec.crop = 8, spec.pad = 2, spec.flip = true;
  Augmenter aug(ImageShape{10, 12, 3}, spec, true, {120.0, 110.0, 100.0}, {60.0, 50.0, 0.0});
  const int n = 37, hw = aug.out_h * aug.out_w;
  std::mt19937 rng(5);
  const size_t per = aug.out_bytes();
  std::vector<uint8_t> px(size_t(n) * per);
  for (auto& p : px) p = uint8_t(rng());
  std::vector<uint8_t> flips(n);
  for (auto& f : flips) f = uint8_t(rng() % 2);
  std::vector<float> want(n * per);
  for (int i = 0; i < n; ++i) aug.normalize(px.data() + i * per, flips[i], want.data() + i * per);
  std::vector<float> ss(aug.scale);
  ss.insert(ss.end(), aug.shift.begin(), aug.shift.end());
  auto gpx = up(px);
  auto gflips = up(flips);
  auto gss = up(ss);
  auto gy = poisoned_bf16(want.size());
  gpu::InputShape s{n, 3, aug.out_h, aug.out_w};
  gpu::normalize_input(ctx, s, gpx.get(), gflips.get(), gss.get(), gy.get(), gpu::Layout::nhwc);
  const auto nhwc = to_nhwc(round_bf16(want), n, 3, hw);
  EXPECT_EQ(down_bf16(ctx, gy), nhwc);
  // Stored as a net's input: padded to 8 channels, and as 2x2 blocks and as windows for a 3x3/2,
  // a 7x7/2 and a 3x3/1 convolution with padding (zeros where the convolution pads, not the
  // normalised zero pixel).
  for (const gpu::InputLayout l :
       {gpu::plain_input(3, aug.out_h, aug.out_w, 8), gpu::space_to_depth_input(3, aug.out_h, aug.out_w, 3, 1),
        gpu::space_to_depth_input(3, aug.out_h, aug.out_w, 7, 3), gpu::patches_input(3, aug.out_h, aug.out_w, 3, 1, 2),
        gpu::patches_input(3, aug.out_h, aug.out_w, 7, 3, 2), gpu::patches_input(3, aug.out_h, aug.out_w, 3, 1, 1)}) {
    s.packed = l;
    auto gp = poisoned_bf16(size_t(n) * l.sample_size());
    gpu::normalize_input(ctx, s, gpx.get(), gflips.get(), gss.get(), gp.get(), gpu::Layout::nhwc);
    const auto got = down_bf16(ctx, gp), expected = pack_input(l, n, nhwc);
    EXPECT_EQ(got, expected) << "fold " << int(l.fold) << ", k " << l.k << ", stride " << l.stride << ", " << l.c_stored
                             << " channels";
  }
}

TEST_F(GpuBf16, ReorderRoundTrips) {
  const int n = 5, c = 7, hw = 11;
  auto x = round_bf16(randn(size_t(n) * c * hw, 23));
  auto gx = up_bf16(x), gnhwc = poisoned_bf16(x.size()), gback = poisoned_bf16(x.size());
  gpu::nchw_to_nhwc(ctx, n, c, hw, gx.get(), gnhwc.get());
  gpu::nhwc_to_nchw(ctx, n, c, hw, gnhwc.get(), gback.get());
  EXPECT_EQ(down_bf16(ctx, gnhwc), to_nhwc(x, n, c, hw));
  EXPECT_EQ(down_bf16(ctx, gback), x);
  auto g32 = up(randn(1000, 24));
  auto g16 = poisoned_bf16(1000);
  gpu::round_to_bf16(ctx, 1000, g32.get(), g16.get());
  EXPECT_EQ(down_bf16(ctx, g16), round_bf16(down(ctx, g32)));
}

TEST_F(GpuBf16, UpdateRefreshesTheWeightCopy) {
  // Two conv segments with plain weights around them: [0, 5) plain, [5, 5 + 4*3*9) conv 4x3x3x3,
  // then 7 plain, then a 2x5x2x2 conv, then 3 plain.
  const int k1 = 4, c1 = 3, rs1 = 9, k2 = 2, c2 = 5, rs2 = 4;
  const size_t a = 5, b = a + size_t(k1) * c1 * rs1, d = b + 7, e = d + size_t(k2) * c2 * rs2, n = e + 3;
  std::vector<gpu::WeightSegment> seg{{a, b, c1, rs1, a, c1}, {d, e, c2, rs2, d, c2}};
  gpu::DeviceBuffer<gpu::WeightSegment> gseg(seg.size());
  gseg.upload(seg.data(), seg.size());
  const auto w0 = randn(n, 25), g = randn(n, 26);
  std::vector<float> w = w0, buf(n, 0.1f);
  convoy::sgd_update(n, w.data(), g.data(), buf.data(), 0.05f, 0.9f, true, 5e-4f);
  auto expect = [&](const std::vector<float>& v) {
    std::vector<float> r = round_bf16(v), out = r;
    const auto s1 = krsc(std::vector<float>(r.begin() + a, r.begin() + b), k1, c1, rs1);
    const auto s2 = krsc(std::vector<float>(r.begin() + d, r.begin() + e), k2, c2, rs2);
    std::copy(s1.begin(), s1.end(), out.begin() + a);
    std::copy(s2.begin(), s2.end(), out.begin() + d);
    return out;
  };
  auto gw = up(w0), gg = up(g), gbuf = up(std::vector<float>(n, 0.1f));
  auto gcopy = poisoned_bf16(n);
  const gpu::WeightCopy copy{gcopy.get(), gseg.get(), int(seg.size())};
  gpu::refresh_weight_copy(ctx, n, gw.get(), copy);
  EXPECT_EQ(down_bf16(ctx, gcopy), expect(w0));
  auto sc = up(std::vector<gpu::StepScalars>{gpu::step_scalars(0, 0.05, 0.9, 0.999, 1)});
  gpu::sgd_update(gpu::UpdateSpan{0, n, ctx.stream()}, gw.get(), gpu::Gradients{gg.get()}, gbuf.get(), sc.get(), 0.9f,
                  true, 5e-4f, copy);
  const auto w1 = down(ctx, gw);
  EXPECT_LT(rel_err(w1, w), 1e-6);
  EXPECT_EQ(down_bf16(ctx, gcopy), expect(w1));
  // Adam refreshes it the same way.
  auto gm = up(std::vector<float>(n, 0.f)), gv = up(std::vector<float>(n, 0.f));
  gpu::adam_update(gpu::UpdateSpan{0, n, ctx.stream()}, gw.get(), gpu::Gradients{gg.get()}, gm.get(), gv.get(),
                   sc.get(), 0.9f, 0.999f, 1e-8f, 0.01f, true, copy);
  EXPECT_EQ(down_bf16(ctx, gcopy), expect(down(ctx, gw)));
}
