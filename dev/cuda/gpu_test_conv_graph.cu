// Plain convolutions through cuDNN's graph API (dev/cuda/conv_graph.h) against conv.cu's ConvPlan:
// forward, backward data and backward filter, heuristics' pick and every searched plan, on ResNet shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "dev/cuda/conv_graph.h"
#include "tests/bf16_host.h"
#include "train/cuda/gpu_context.h"
#include "train/layers/conv.h"

namespace convoy {
namespace {

using gpu::bf16;
using gpu::ConvGraphShape;
using gpu::ConvPass;

constexpr int64_t kWorkspace = int64_t(256) << 20;
// Both sides sum the same bf16 products in fp32 in different orders and round to bf16 (the graph's
// fp32 filter gradient is not rounded): relative L2 well under 2^-7.
constexpr double kRelL2 = 1e-2;

std::vector<ConvGraphShape> shapes() {
  return {
      {8, 14, 14, 256, 64, 1, 1, 1, 0},   // 1x1 reduce
      {8, 14, 14, 64, 64, 3, 3, 1, 1},    // 3x3
      {8, 14, 14, 64, 128, 3, 3, 2, 1},   // 3x3/2, a stage's first block
      {8, 14, 14, 128, 256, 1, 1, 2, 0},  // 1x1/2 downsample
  };
}

std::vector<float> uniform(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

double rel_l2(const std::vector<float>& got, const std::vector<float>& want) {
  double d = 0, w = 0;
  for (size_t i = 0; i < got.size(); ++i) d += (got[i] - want[i]) * double(got[i] - want[i]), w += want[i] * want[i];
  return std::isfinite(d) ? std::sqrt(d / std::max(w, 1e-30)) : INFINITY;
}

// One shape's inputs and ConvPlan's three results (the filter gradient in the graph's KRSC order).
struct Reference {
  gpu::DeviceBuffer<bf16> x, w, dy;
  std::vector<float> y, dx, dw;
  Reference(gpu::Context& ctx, const ConvGraphShape& s)
      : x(test::up_bf16(uniform(size_t(s.n) * s.h * s.w * s.c, 1))),
        w(test::up_bf16(uniform(size_t(s.k) * s.r * s.s * s.c, 2))),
        dy(test::up_bf16(uniform(size_t(s.n) * s.p() * s.q() * s.k, 3))) {
    ConvShape cs;
    cs.n = s.n, cs.c_in = s.c, cs.h_in = s.h, cs.w_in = s.w, cs.c_out = s.k, cs.kh = s.r, cs.kw = s.s;
    cs.stride = s.stride, cs.pad = s.pad;
    gpu::ConvPlan plan(ctx, cs);
    gpu::DeviceBuffer<bf16> yb(dy.size()), dxb(x.size()), dw16(w.size());
    gpu::DeviceBuffer<float> dw32(w.size());
    gpu::conv_forward(ctx, plan, x.get(), w.get(), nullptr, yb.get());
    gpu::conv_backward(ctx, plan, x.get(), w.get(), dy.get(), dxb.get(), dw32.get(), nullptr, dw16.get());
    y = test::down_bf16(ctx, yb), dx = test::down_bf16(ctx, dxb);
    // ConvPlan's dw is in the CPU's [k, c, r, s] order (cuDNN's bf16 KRSC widened, or a 1x1's fp32
    // product).
    ctx.synchronize();
    std::vector<float> kcrs(w.size());
    dw32.download(kcrs.data(), kcrs.size());
    dw.resize(kcrs.size());
    for (int k = 0; k < s.k; ++k)
      for (int c = 0; c < s.c; ++c)
        for (int t = 0; t < s.r * s.s; ++t)
          dw[(size_t(k) * s.r * s.s + t) * s.c + c] = kcrs[(size_t(k) * s.c + c) * s.r * s.s + t];
  }
};

// The graph plan's output for one run, as floats.
std::vector<float> run_plan(gpu::Context& ctx, const gpu::ConvGraphPlan& gp, Reference& r) {
  const ConvPass p = gp.pass();
  const size_t n = p == ConvPass::forward ? r.dy.size() : p == ConvPass::backward_data ? r.x.size() : r.w.size();
  const bool wide = gp.types().out == CUDNN_DATA_FLOAT;
  gpu::DeviceBuffer<bf16> out16 = test::poisoned_bf16(n);
  gpu::DeviceBuffer<float> out32(n);
  CONVOY_CUDA_CHECK(cudaMemset(out32.get(), 0xff, n * sizeof(float)));
  void* out = wide ? static_cast<void*>(out32.get()) : static_cast<void*>(out16.get());
  const gpu::ConvGraphTensors t{p == ConvPass::backward_data ? out : r.x.get(),
                                p == ConvPass::backward_filter ? out : r.w.get(),
                                p == ConvPass::forward ? out : r.dy.get()};
  gpu::DeviceBuffer<unsigned char> ws(std::max<size_t>(size_t(gp.plan().workspace_bytes()), 1));
  gp.run(ctx.cudnn(), ctx.stream(), t, ws.get());
  if (!wide) return test::down_bf16(ctx, out16);
  ctx.synchronize();
  std::vector<float> v(n);
  out32.download(v.data(), n);
  return v;
}

const std::vector<float>& want_of(const Reference& r, ConvPass p) {
  return p == ConvPass::forward ? r.y : p == ConvPass::backward_data ? r.dx : r.dw;
}

struct GpuConvGraph : ::testing::Test {
  gpu::Context ctx{0, size_t(kWorkspace), gpu::MathMode::bf16};
};

}  // namespace

// Each pass in bf16 builds (cuDNN 9 runs plain bf16 NHWC convolutions through the graph API, as
// cudnn-frontend does for PyTorch) and matches ConvPlan, the heuristics' pick and each searched plan.
TEST_F(GpuConvGraph, MatchesConvPlan) {
  const gpu::graph::SearchLimits limits{8, 2.0, 2, true, 1};
  for (const ConvGraphShape& s : shapes()) {
    Reference r(ctx, s);
    for (ConvPass p : {ConvPass::forward, ConvPass::backward_data, ConvPass::backward_filter}) {
      SCOPED_TRACE(s.text() + " " + gpu::pass_name(p));
      gpu::ConvGraphPlan gp(ctx.cudnn(), p, s);
      ASSERT_TRUE(gp.support().ok) << gp.support().why;
      const gpu::graph::Support picked = gp.pick(ctx.cudnn(), kWorkspace);
      ASSERT_TRUE(picked.ok) << picked.why;
      const double first = rel_l2(run_plan(ctx, gp, r), want_of(r, p));
      std::printf("  %s %s: heuristics' pick %s, rel L2 %.2g\n", s.text().c_str(), gpu::pass_name(p),
                  gp.plan().engine().text().c_str(), first);
      EXPECT_LT(first, kRelL2);
      gpu::graph::PlanSearch found = gp.search(ctx.cudnn(), kWorkspace, limits);
      EXPECT_FALSE(found.plans.empty());
      for (gpu::graph::Plan& plan : found.plans) {
        const std::string text = plan.engine().text() + " [" + plan.origin() + "]";
        gp.use(std::move(plan));
        EXPECT_LT(rel_l2(run_plan(ctx, gp, r), want_of(r, p)), kRelL2) << text;
      }
    }
  }
}

// The filter gradient straight into fp32, where cuDNN builds it (said either way), matches too.
TEST_F(GpuConvGraph, FilterGradientInFp32) {
  for (const ConvGraphShape& s : shapes()) {
    Reference r(ctx, s);
    gpu::ConvGraphPlan gp(ctx.cudnn(), ConvPass::backward_filter, s, {CUDNN_DATA_BFLOAT16, CUDNN_DATA_FLOAT});
    const gpu::graph::Support picked = gp.support().ok ? gp.pick(ctx.cudnn(), kWorkspace) : gp.support();
    if (!picked.ok) {
      std::printf("  %s: no fp32 filter gradient: %s\n", s.text().c_str(), picked.why.c_str());
      continue;
    }
    const double d = rel_l2(run_plan(ctx, gp, r), r.dw);
    std::printf("  %s: fp32 filter gradient by %s, rel L2 %.2g\n", s.text().c_str(), gp.plan().engine().text().c_str(),
                d);
    EXPECT_LT(d, kRelL2) << s.text();
  }
}

}  // namespace convoy
