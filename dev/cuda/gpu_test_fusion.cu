// Which fused convolution + batch-norm patterns (dev/cuda/fused_conv_bn.h) cuDNN builds for ResNet's
// shapes on this GPU, each refusal printed with cuDNN's reason, and each built one against the unfused ops.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "dev/cuda/cudnn_log.h"
#include "dev/cuda/fused_conv_bn.h"
#include "tests/bf16_host.h"
#include "train/cuda/gpu_context.h"
#include "train/layers/conv.h"

namespace convoy {
namespace {

using gpu::bf16;
using gpu::FusedConvShape;
using gpu::FusedConvTypes;
using gpu::FusedPattern;

// CONVOY_CUDNN_LOG=1: cuDNN's own log on stderr, set before main (and so before any cuDNN call).
const bool kCudnnLog = gpu::cudnn_log_from_env();

struct Case {
  const char* name;
  FusedConvShape shape;
  bool must_build_on_sm90;  // ConvGenstats: 1x1 and 3x3 stride-1 shapes, as NVIDIA's MLPerf ResNet runs them
};

constexpr int kBatch = 32;

std::vector<Case> cases() {
  return {
      {"resnet50 layer1 1x1 256->64 @56", {kBatch, 56, 56, 256, 64, 1, 1, 1, 0}, true},
      {"resnet50 layer1 3x3 64->64 @56", {kBatch, 56, 56, 64, 64, 3, 3, 1, 1}, true},
      {"resnet50 layer1 1x1 64->256 @56", {kBatch, 56, 56, 64, 256, 1, 1, 1, 0}, true},
      {"resnet50 layer2 3x3/2 128->128 56->28", {kBatch, 56, 56, 128, 128, 3, 3, 2, 1}, false},
      {"resnet50 layer3 1x1 1024->256 @14", {kBatch, 14, 14, 1024, 256, 1, 1, 1, 0}, true},
      {"resnet18 layer1 3x3 64->64 @56", {kBatch, 56, 56, 64, 64, 3, 3, 1, 1}, true},
  };
}

// Tolerances. y: the fused and unfused convolutions each round an fp32 sum to bf16, in different
// orders; 2 bf16 ulps of the value plus 2^-8 of the tensor's rms covers that and, with the prologue, a
// bf16-rounded activation. Statistics: summing y before or after its rounding (half an ulp, 2^-8, per
// element) moves sum by at most 2^-8 of the sum of |y| and sqsum by at most 2^-7 of itself.
constexpr double kYRel = 1.0 / 64, kYRms = 1.0 / 256, kSumOfAbs = 1.0 / 256, kSqsumRel = 1.0 / 128;

std::vector<float> uniform(size_t n, unsigned seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = test::round_bf16(d(rng));  // exact in bf16, so both scale-bias types agree
  return v;
}

gpu::DeviceBuffer<float> up_f32(const std::vector<float>& v) {
  gpu::DeviceBuffer<float> b(v.size());
  b.upload(v.data(), v.size());
  return b;
}

std::vector<float> down_f32(gpu::Context& ctx, const gpu::DeviceBuffer<float>& b) {
  ctx.synchronize();
  std::vector<float> v(b.size());
  b.download(v.data(), v.size());
  return v;
}

// The reference prologue: relu(x * scale[c] + bias[c]) in fp32, rounded once to bf16.
__global__ void scale_bias_relu(size_t total, int c, const bf16* x, const float* scale, const float* bias, bf16* y) {
  CONVOY_GRID_STRIDE(i, total) {
    const int ch = int(i % c);
    y[i] = __float2bfloat16_rn(fmaxf(__bfloat162float(x[i]) * scale[ch] + bias[ch], 0.f));
  }
}

// The inputs of one case, and the unfused reference: the project's cuDNN convolution (conv.cu's
// ConvPlan, bf16 NHWC, fp32 compute) and per-channel sums in double on the host.
struct Reference {
  std::vector<float> y;
  std::vector<double> sum, sqsum, sum_abs;
  double rms = 0;
};

struct Inputs {
  gpu::DeviceBuffer<bf16> x, w;
  std::vector<float> scale, bias;
  gpu::DeviceBuffer<float> scale_d, bias_d;
  gpu::DeviceBuffer<bf16> scale_b, bias_b;
  Inputs(const FusedConvShape& s, bool prologue)
      : x(test::up_bf16(uniform(size_t(s.n) * s.h * s.w * s.c, 1, prologue ? -1.f : 0.f, 1.f))),
        w(test::up_bf16(uniform(size_t(s.k) * s.r * s.s * s.c, 2, -1.f, 1.f))), scale(uniform(s.c, 3, 0.5f, 1.5f)),
        bias(uniform(s.c, 4, -0.5f, 0.5f)), scale_d(up_f32(scale)), bias_d(up_f32(bias)), scale_b(test::up_bf16(scale)),
        bias_b(test::up_bf16(bias)) {}
};

Reference reference(gpu::Context& ctx, const FusedConvShape& s, const Inputs& in, bool prologue) {
  ConvShape cs;
  cs.n = s.n, cs.c_in = s.c, cs.h_in = s.h, cs.w_in = s.w, cs.c_out = s.k, cs.kh = s.r, cs.kw = s.s;
  cs.stride = s.stride, cs.pad = s.pad;
  gpu::ConvPlan plan(ctx, cs, false);
  const bf16* x = in.x.get();
  gpu::DeviceBuffer<bf16> activated;
  if (prologue) {
    activated = gpu::DeviceBuffer<bf16>(in.x.size());
    scale_bias_relu<<<gpu::grid_for(in.x.size()), 256, 0, ctx.stream()>>>(in.x.size(), s.c, x, in.scale_d.get(),
                                                                          in.bias_d.get(), activated.get());
    CONVOY_CUDA_CHECK_LAUNCH();
    x = activated.get();
  }
  gpu::DeviceBuffer<bf16> y(cs.out_count());
  gpu::conv_forward(ctx, plan, x, in.w.get(), nullptr, y.get());
  Reference r;
  r.y = test::down_bf16(ctx, y);
  r.sum.assign(s.k, 0.0), r.sqsum.assign(s.k, 0.0), r.sum_abs.assign(s.k, 0.0);
  double all_sq = 0;
  for (size_t i = 0; i < r.y.size(); ++i) {
    const double v = r.y[i];
    const size_t k = i % s.k;
    r.sum[k] += v, r.sqsum[k] += v * v, r.sum_abs[k] += std::fabs(v);
    all_sq += v * v;
  }
  r.rms = std::sqrt(all_sq / double(r.y.size()));
  return r;
}

// Compares one built plan's outputs with the reference; prints the worst errors, returns whether all
// are within the tolerances.
bool matches(const std::vector<float>& y, const std::vector<float>& sum, const std::vector<float>& sqsum,
             const Reference& r) {
  size_t bad_y = 0, nonfinite = 0;
  double worst_y = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    if (!std::isfinite(y[i])) ++nonfinite;
    const double d = std::fabs(double(y[i]) - r.y[i]);
    worst_y = std::max(worst_y, d / r.rms);
    if (!(d <= kYRel * std::fabs(r.y[i]) + kYRms * r.rms)) ++bad_y;
  }
  size_t bad_stats = 0;
  double worst_sum = 0, worst_sq = 0;
  for (size_t k = 0; k < sum.size(); ++k) {
    const double ds = std::fabs(double(sum[k]) - r.sum[k]) / std::max(r.sum_abs[k], 1e-30);
    const double dq = std::fabs(double(sqsum[k]) - r.sqsum[k]) / std::max(r.sqsum[k], 1e-30);
    worst_sum = std::max(worst_sum, ds), worst_sq = std::max(worst_sq, dq);
    if (!(ds <= kSumOfAbs) || !(dq <= kSqsumRel)) ++bad_stats;
  }
  std::printf(
      "    y: %zu of %zu outside tolerance (%zu not finite), worst |diff|/rms %.3g (y rms %.3g); sum: worst "
      "|diff|/sum|y| %.3g (limit %.3g); sqsum: worst relative %.3g (limit %.3g); %zu of %zu channels outside\n",
      bad_y, y.size(), nonfinite, worst_y, r.rms, worst_sum, kSumOfAbs, worst_sq, kSqsumRel, bad_stats, sum.size());
  return bad_y == 0 && nonfinite == 0 && bad_stats == 0;
}

// Builds one pattern for one case, prints whether it built (engine, workspace, or cuDNN's reason),
// and where it did with bf16 I/O (the trainer's), runs it and compares. Returns whether it built.
bool check_case(gpu::Context& ctx, const Case& c, FusedPattern pattern, const FusedConvTypes& types) {
  const bool prologue = gpu::has_prologue(pattern);
  std::printf("[fusion] %-26s %-40s %s, %s: ", gpu::pattern_name(pattern), c.name, c.shape.text().c_str(),
              types.text().c_str());
  std::fflush(stdout);  // before cuDNN's own log of the build, where CONVOY_CUDNN_LOG asks for it
  gpu::FusedConvPlan plan(ctx.cudnn(), pattern, c.shape, int64_t(1) << 30, types);
  if (!plan.built()) {
    std::printf("NOT BUILT: %s\n", plan.support().why.c_str());
    return false;
  }
  std::printf("built, %s, workspace %lld bytes\n", plan.engine().text().c_str(), (long long)plan.workspace_bytes());
  std::fflush(stdout);
  if (types.io != CUDNN_DATA_BFLOAT16) {
    std::printf("    (built only: the reference here is bf16)\n");
    return true;
  }
  const cudnnDataType_t sb_type = types.scale_bias;
  const FusedConvShape& s = c.shape;
  Inputs in(s, prologue);
  const Reference r = reference(ctx, s, in, prologue);
  gpu::DeviceBuffer<bf16> y = test::poisoned_bf16(size_t(s.n) * s.p() * s.q() * s.k);
  gpu::DeviceBuffer<float> sum = up_f32(std::vector<float>(s.k, NAN)), sqsum = up_f32(std::vector<float>(s.k, NAN));
  gpu::DeviceBuffer<unsigned char> ws(std::max<size_t>(size_t(plan.workspace_bytes()), 1));
  gpu::FusedConvTensors t;
  t.x = in.x.get(), t.w = in.w.get(), t.y = y.get(), t.sum = sum.get(), t.sqsum = sqsum.get();
  t.scale = sb_type == CUDNN_DATA_FLOAT ? static_cast<const void*>(in.scale_d.get()) : in.scale_b.get();
  t.bias = sb_type == CUDNN_DATA_FLOAT ? static_cast<const void*>(in.bias_d.get()) : in.bias_b.get();
  // A built plan that fails to run is a failure of this case; the other cases still report.
  try {
    plan.run(ctx.cudnn(), ctx.stream(), t, ws.get());
    // Without statistics in the pattern, y alone is compared (no channels).
    const bool stats = gpu::has_statistics(pattern);
    const bool ok = matches(test::down_bf16(ctx, y), stats ? down_f32(ctx, sum) : std::vector<float>{},
                            stats ? down_f32(ctx, sqsum) : std::vector<float>{}, r);
    EXPECT_TRUE(ok) << gpu::pattern_name(pattern) << " " << c.name << " differs from the unfused ops";
  } catch (const Error& e) {
    std::printf("    RUN FAILED: %s\n", e.what());
    ADD_FAILURE() << gpu::pattern_name(pattern) << " " << c.name << " built but failed to run: " << e.what();
  }
  return true;
}

// Batch norm's finished statistics on the host, in double: what BnFinalizePlan should give.
struct Finished {
  std::vector<float> mean, invstd, scale, bias, run_mean, run_var, run_var_biased;
};

Finished finish_on_host(const std::vector<float>& sum, const std::vector<float>& sqsum, const std::vector<float>& gamma,
                        const std::vector<float>& beta, const std::vector<float>& rm, const std::vector<float>& rv,
                        long long count, double eps, double momentum) {
  Finished f;
  for (size_t k = 0; k < sum.size(); ++k) {
    const double mean = double(sum[k]) / count, var = double(sqsum[k]) / count - mean * mean;
    const double invstd = 1 / std::sqrt(var + eps);
    f.mean.push_back(float(mean));
    f.invstd.push_back(float(invstd));
    f.scale.push_back(float(gamma[k] * invstd));
    f.bias.push_back(float(beta[k] - mean * gamma[k] * invstd));
    f.run_mean.push_back(float((1 - momentum) * rm[k] + momentum * mean));
    f.run_var.push_back(float((1 - momentum) * rv[k] + momentum * var * count / (count - 1)));
    f.run_var_biased.push_back(float((1 - momentum) * rv[k] + momentum * var));
  }
  return f;
}

// Worst relative difference of got from want, printed under `name`; whether it is within `tol`.
bool close(const char* name, const std::vector<float>& got, const std::vector<float>& want, double tol) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(double(got[i]) - want[i]) / std::max(std::fabs(double(want[i])), 1e-3);
    worst = std::isfinite(got[i]) ? std::max(worst, d) : INFINITY;
  }
  std::printf("    %-22s worst relative difference %.3g (limit %.3g)\n", name, worst, tol);
  return worst <= tol;
}

struct GpuFusion : ::testing::Test {
  gpu::Context ctx{0, size_t(256) << 20, gpu::MathMode::bf16};
  cudaDeviceProp prop{};
  void SetUp() override {
    CONVOY_CUDA_CHECK(cudaGetDeviceProperties(&prop, ctx.device()));
    std::printf("[fusion] %s (sm_%d%d), cuDNN %zu; cuDNN's own log of each refusal: %s\n", prop.name, prop.major,
                prop.minor, cudnnGetVersion(), kCudnnLog ? "on (stderr)" : "off, run with CONVOY_CUDNN_LOG=1");
  }
};

}  // namespace

TEST_F(GpuFusion, ConvGenstats) {
  std::vector<std::string> missing;
  for (const Case& c : cases())
    if (!check_case(ctx, c, FusedPattern::conv_genstats, FusedConvTypes{}) && c.must_build_on_sm90)
      missing.push_back(c.name);
  if (prop.major == 9)
    for (const std::string& m : missing)
      ADD_FAILURE() << "ConvGenstats did not build on sm_90 for " << m << " (reason printed above)";
}

// The prologue in the trainer's types (bf16 I/O, fp32 or bf16 scale and bias), with genstats at the
// I/O precision as cudnn-frontend's genstats node sets it, and in the fp16 types of cuDNN's own
// samples (legacy fusion_sample.cpp: fp32 genstats; frontend SBRCS: fp16 genstats), to tell a
// refusal of the pattern from a refusal of bf16. Which of them builds is reported, not required.
TEST_F(GpuFusion, ScaleBiasReluConvGenstats) {
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT, b16 = CUDNN_DATA_BFLOAT16, f16 = CUDNN_DATA_HALF;
  const std::vector<FusedConvTypes> variants{
      {b16, f32, f32}, {b16, b16, f32}, {b16, f32, b16}, {f16, f16, f32}, {f16, f16, f16}};
  for (const Case& c : cases())
    for (const FusedConvTypes& t : variants) check_case(ctx, c, FusedPattern::scale_bias_relu_conv_genstats, t);
}

// The prologue without statistics, in the trainer's types: the generic runtime fusion engine's
// mainloop fusion, which cuDNN's guide lists for bf16 on Hopper. Which builds is reported, not required.
TEST_F(GpuFusion, ScaleBiasReluConv) {
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT, b16 = CUDNN_DATA_BFLOAT16;
  for (const Case& c : cases())
    for (const FusedConvTypes& t : {FusedConvTypes{b16, f32, f32}, FusedConvTypes{b16, b16, f32}})
      check_case(ctx, c, FusedPattern::scale_bias_relu_conv, t);
}

// The statistics' finishing step alone, from sums of a known mean and variance per channel.
TEST_F(GpuFusion, BnFinalize) {
  const int c = 256;
  const long long count = 32LL * 56 * 56;
  const double eps = 1e-5, momentum = 0.1;
  gpu::BnFinalizePlan plan(ctx.cudnn(), c, int64_t(1) << 30);
  std::printf("[fusion] BnFinalize %d channels: ", c);
  if (!plan.built()) {
    std::printf("NOT BUILT: %s\n", plan.support().why.c_str());
    return;
  }
  std::printf("built, %s, workspace %lld bytes\n", plan.engine().text().c_str(), (long long)plan.workspace_bytes());
  const std::vector<float> mean = uniform(c, 5, -1.f, 1.f), var = uniform(c, 6, 0.5f, 2.f);
  std::vector<float> sum(c), sqsum(c);
  for (int k = 0; k < c; ++k) sum[k] = float(mean[k] * count), sqsum[k] = float((var[k] + mean[k] * mean[k]) * count);
  const std::vector<float> gamma = uniform(c, 7, 0.5f, 1.5f), beta = uniform(c, 8, -0.5f, 0.5f);
  const std::vector<float> rm = uniform(c, 9, -0.2f, 0.2f), rv = uniform(c, 10, 0.8f, 1.2f);
  const Finished want = finish_on_host(sum, sqsum, gamma, beta, rm, rv, count, eps, momentum);
  auto d_sum = up_f32(sum), d_sq = up_f32(sqsum), d_g = up_f32(gamma), d_b = up_f32(beta), d_rm = up_f32(rm);
  auto d_rv = up_f32(rv), rm_out = up_f32(std::vector<float>(c, NAN)), rv_out = up_f32(std::vector<float>(c, NAN));
  auto saved_mean = up_f32(std::vector<float>(c, NAN)), saved_invstd = up_f32(std::vector<float>(c, NAN));
  auto eq_scale = up_f32(std::vector<float>(c, NAN)), eq_bias = up_f32(std::vector<float>(c, NAN));
  gpu::DeviceBuffer<unsigned char> ws(std::max<size_t>(size_t(plan.workspace_bytes()), 1));
  gpu::BnFinalizeTensors t;
  t.sum = d_sum.get(), t.sqsum = d_sq.get(), t.gamma = d_g.get(), t.beta = d_b.get();
  t.running_mean_in = d_rm.get(), t.running_var_in = d_rv.get();
  t.running_mean_out = rm_out.get(), t.running_var_out = rv_out.get();
  t.saved_mean = saved_mean.get(), t.saved_invstd = saved_invstd.get();
  t.eq_scale = eq_scale.get(), t.eq_bias = eq_bias.get();
  plan.run(ctx.cudnn(), ctx.stream(), t, count, eps, momentum, ws.get());
  constexpr double kTol = 1e-4;  // fp32 arithmetic on well-conditioned statistics
  EXPECT_TRUE(close("saved mean", down_f32(ctx, saved_mean), want.mean, kTol));
  EXPECT_TRUE(close("saved inv std", down_f32(ctx, saved_invstd), want.invstd, kTol));
  EXPECT_TRUE(close("equivalent scale", down_f32(ctx, eq_scale), want.scale, kTol));
  EXPECT_TRUE(close("equivalent bias", down_f32(ctx, eq_bias), want.bias, kTol));
  EXPECT_TRUE(close("running mean", down_f32(ctx, rm_out), want.run_mean, kTol));
  const std::vector<float> got_rv = down_f32(ctx, rv_out);
  // The project's batch norm keeps the unbiased variance; the biased reading is printed for comparison.
  close("running var (biased)", got_rv, want.run_var_biased, kTol);
  EXPECT_TRUE(close("running var (unbiased)", got_rv, want.run_var, kTol));
}

}  // namespace convoy
