// Milliseconds of cuDNN's fused convolution + batch-norm statistics (dev/cuda/fused_conv_bn.h)
// against the unfused passes the trainer runs today, for ResNet shapes at batch 256 on one GPU: the
// heuristics' first pick, then every engine configuration cuDNN builds for the graph, each timed.
// `fusion_bench conv` compares plain convolutions instead (conv_graph_bench.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "dev/cuda/conv_graph_bench.h"
#include "dev/cuda/cuda_timing.cuh"
#include "dev/cuda/cudnn_log.h"
#include "dev/cuda/fused_conv_bn.h"
#include "shared/error.h"
#include "train/cuda/channels.cuh"
#include "train/cuda/gpu_context.h"
#include "train/gpu_info.h"
#include "train/layers/conv.h"

namespace {

using namespace convoy;
using gpu::bf16;
using gpu::FusedConvShape;
using gpu::FusedConvTypes;
using gpu::FusedPattern;

constexpr int kBatch = 256, kWarmup = 3, kReps = 20;
constexpr int kSearchReps = 10;
constexpr int64_t kWorkspaceLimit = int64_t(1) << 30;
// Per search: runtime-compiled engines compile as their plan is built (about a second each), so each
// search is bounded: the trainer's ConvGenstats widest, the four other variants narrower; with the
// heuristics' first picks, at most about 10 s a shape. A second argument scales these seconds.
constexpr gpu::graph::SearchLimits kConvSearch{8, 3.0}, kOtherSearch{3, 1.0};

struct Case {
  const char* name;
  FusedConvShape shape;
};

std::vector<Case> cases() {
  return {
      {"resnet50 layer1 1x1 256->64 @56", {kBatch, 56, 56, 256, 64, 1, 1, 1, 0}},
      {"resnet50 layer1 / resnet18 layer1 3x3 64->64 @56", {kBatch, 56, 56, 64, 64, 3, 3, 1, 1}},
      {"resnet50 layer1 1x1 64->256 @56", {kBatch, 56, 56, 64, 256, 1, 1, 1, 0}},
      {"resnet50 layer2 3x3/2 128->128 56->28", {kBatch, 56, 56, 128, 128, 3, 3, 2, 1}},
      {"resnet50 layer3 1x1 1024->256 @14", {kBatch, 14, 14, 1024, 256, 1, 1, 1, 0}},
  };
}

// Batch norm's statistics terms (batchnorm_nhwc.cu's MomentTerms: x and x^2 per element) through the
// same channel-sum kernels (channels.cuh), here ending in the raw sums.
struct MomentTerms {
  const bf16* x;
  int c;
  __device__ void begin(int) {}
  __device__ float2 operator()(long long r, int ch) const {
    const float v = gpu::load(x[size_t(r) * c + ch]);
    return make_float2(v, v * v);
  }
  template <int V>
  __device__ void stage_pack(float2 (&)[gpu::channels::kTilePacks][V + 1], int) {}
  template <int V>
  __device__ void pack(long long r, int p, float2 (&out)[V]) const {
    const gpu::Pack<bf16, V> q = reinterpret_cast<const gpu::Pack<bf16, V>*>(x + size_t(r) * c)[p];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float v = gpu::load(q.v[j]);
      out[j] = make_float2(v, v * v);
    }
  }
};

struct StoreSums {
  float *sum, *sqsum;
  __device__ void operator()(int ch, double s, double q) const { sum[ch] = float(s), sqsum[ch] = float(q); }
};

void channel_stats(gpu::Context& ctx, long long rows, int c, const bf16* y, float* sum, float* sqsum) {
  gpu::channels::Workspace ws(ctx);
  float2* part = ws.take<float2>(size_t(gpu::channels::parts(rows)) * c, "statistics");
  gpu::channels::with_pack<bf16>(
      c,
      [&](auto v) {
        gpu::channels::sums<decltype(v)::value>(ctx, rows, c, MomentTerms{y, c}, StoreSums{sum, sqsum}, part);
      },
      y);
}

// The unfused prologue: relu(x * scale[c] + bias[c]), as batch norm's normalising pass writes it.
__global__ void scale_bias_relu(size_t total, int c, const bf16* x, const float* scale, const float* bias, bf16* y) {
  CONVOY_GRID_STRIDE(i, total) {
    const int ch = int(i % c);
    y[i] = __float2bfloat16_rn(fmaxf(__bfloat162float(x[i]) * scale[ch] + bias[ch], 0.f));
  }
}

// Milliseconds per call of f, from events around `reps` calls after kWarmup.
double time_ms(gpu::Context& ctx, const std::function<void()>& f, int reps = kReps) {
  return bench::event_ms(ctx, f, reps, kWarmup);
}

struct Buffers {
  gpu::DeviceBuffer<bf16> x, w, y, activated;
  gpu::DeviceBuffer<float> sum, sqsum, scale, bias;
  explicit Buffers(const FusedConvShape& s)
      : x(size_t(s.n) * s.h * s.w * s.c), w(size_t(s.k) * s.r * s.s * s.c), y(size_t(s.n) * s.p() * s.q() * s.k),
        activated(x.size()), sum(s.k), sqsum(s.k), scale(s.c), bias(s.c) {
    // Small values, so no pass meets infinities or denormals.
    CONVOY_CUDA_CHECK(cudaMemset(x.get(), 0x3c, x.size() * sizeof(bf16)));  // 0x3c3c: about 0.0115
    CONVOY_CUDA_CHECK(cudaMemset(w.get(), 0x3c, w.size() * sizeof(bf16)));
    // The prologue's scale 2 and bias -1/256 keep relu's input positive: the fused and unfused sums agree.
    const std::vector<float> two(scale.size(), 2.f), shift(bias.size(), -1.f / 256);
    scale.upload(two.data(), two.size());
    bias.upload(shift.data(), shift.size());
  }
  std::vector<float> sums(gpu::Context& ctx) {
    ctx.synchronize();
    std::vector<float> v(sum.size());
    sum.download(v.data(), v.size());
    return v;
  }
};

// Milliseconds per run of a built plan over b (kept in b.y, b.sum, b.sqsum).
double time_plan(gpu::Context& ctx, const gpu::FusedConvPlan& plan, Buffers& b, int reps) {
  gpu::DeviceBuffer<unsigned char> ws(std::max<size_t>(size_t(plan.workspace_bytes()), 1));
  gpu::FusedConvTensors t;
  t.x = b.x.get(), t.w = b.w.get(), t.y = b.y.get(), t.sum = b.sum.get(), t.sqsum = b.sqsum.get();
  t.scale = b.scale.get(), t.bias = b.bias.get();
  return time_ms(
      ctx, [&] { plan.run(ctx.cudnn(), ctx.stream(), t, ws.get()); }, reps);
}

// Times one fused plan if cuDNN built it; prints its line either way. Returns its ms, or -1.
double time_fused(gpu::Context& ctx, const gpu::FusedConvPlan& plan, Buffers& b, const char* label) {
  if (!plan.built()) {
    std::printf("  %-34s not built: %s\n", label, plan.support().why.c_str());
    return -1;
  }
  const double ms = time_plan(ctx, plan, b, kReps);
  std::printf("  %-34s %8.3f ms  (%s, workspace %lld bytes)\n", label, ms, plan.engine().text().c_str(),
              (long long)plan.workspace_bytes());
  return ms;
}

// Worst difference of the fused sums from the unfused ones, relative to the largest unfused sum.
double worst_sum_diff(const std::vector<float>& got, const std::vector<float>& want) {
  double top = 1e-30, worst = 0;
  for (float w : want) top = std::max(top, double(std::fabs(w)));
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::isfinite(got[i]) ? std::max(worst, std::fabs(double(got[i]) - want[i]) / top) : INFINITY;
  return worst;
}

// Every engine configuration cuDNN builds for plan's graph, each timed (kSearchReps runs after
// warm-up) and its sums checked against `want` where given (bf16 I/O); one line per configuration,
// built or refused, then the fastest against the unfused passes' `unfused_ms`.
void search_and_time(gpu::Context& ctx, gpu::FusedConvPlan& plan, Buffers& b, const gpu::graph::SearchLimits& limits,
                     const std::vector<float>* want, double unfused_ms) {
  gpu::graph::PlanSearch found = plan.search(ctx.cudnn(), kWorkspaceLimit, limits);
  std::printf("    search (%s): %zu built, %zu refused, %d not tried (limits: %d plans, %.1f s); %lld global engines\n",
              plan.types().text().c_str(), found.plans.size(), found.refusals.size(), found.not_tried, limits.max_plans,
              limits.max_seconds, (long long)found.global_count);
  double best = -1;
  std::string best_text;
  for (gpu::graph::Plan& p : found.plans) {
    const std::string text = p.engine().text() + ", workspace " + std::to_string(p.workspace_bytes()) + " [" +
                             p.origin() + "]";
    plan.use(std::move(p));
    // NaN sums first, so a configuration that leaves them unwritten cannot pass on the last one's.
    CONVOY_CUDA_CHECK(cudaMemsetAsync(b.sum.get(), 0xff, b.sum.size() * sizeof(float), ctx.stream()));
    double ms = 0;
    try {
      ms = time_plan(ctx, plan, b, kSearchReps);
    } catch (const Error& e) {
      std::printf("      RUN FAILED: %s  %s\n", e.what(), text.c_str());
      continue;
    }
    std::string check = "sums unchecked";
    if (want) {
      const double d = worst_sum_diff(b.sums(ctx), *want);
      char line[64];
      std::snprintf(line, sizeof line, "sums %s (worst %.2g)", d <= 1e-2 ? "match" : "DIFFER", d);
      check = line;
    }
    std::printf("      %8.3f ms  %s  %s\n", ms, check.c_str(), text.c_str());
    if (best < 0 || ms < best) best = ms, best_text = text;
  }
  for (const std::string& r : found.refusals) std::printf("      refused: %s\n", r.c_str());
  if (best > 0)
    std::printf("    fastest: %.3f ms, %.2fx the unfused passes: %s\n", best, unfused_ms / best, best_text.c_str());
  else
    std::printf("    fastest: none built\n");
}

// One pattern in one set of types: the heuristics' first pick timed, then the search.
void bench_pattern(gpu::Context& ctx, const FusedConvShape& s, FusedPattern pattern, const FusedConvTypes& types,
                   Buffers& b, const gpu::graph::SearchLimits& limits, const std::vector<float>* want,
                   double unfused_ms) {
  const std::string label = std::string("fused ") + gpu::pattern_name(pattern) + " first pick";
  std::printf("  %s, %s:\n", gpu::pattern_name(pattern), types.text().c_str());
  std::fflush(stdout);  // before cuDNN's own log of the build, where CONVOY_CUDNN_LOG asks for it
  gpu::FusedConvPlan plan(ctx.cudnn(), pattern, s, kWorkspaceLimit, types);
  double first = -1;
  try {
    first = time_fused(ctx, plan, b, label.c_str());
  } catch (const Error& e) {
    std::printf("  %-34s RUN FAILED: %s\n", label.c_str(), e.what());
  }
  if (first > 0) std::printf("  %-34s %8.2fx\n", "speed-up over the unfused passes", unfused_ms / first);
  search_and_time(ctx, plan, b, limits, want, unfused_ms);
}

void bench_case(gpu::Context& ctx, const Case& c, double search_scale) {
  const FusedConvShape& s = c.shape;
  std::printf("%s: %s\n", c.name, s.text().c_str());
  Buffers b(s);
  ConvShape cs;
  cs.n = s.n, cs.c_in = s.c, cs.h_in = s.h, cs.w_in = s.w, cs.c_out = s.k, cs.kh = s.r, cs.kw = s.s;
  cs.stride = s.stride, cs.pad = s.pad;
  gpu::ConvPlan conv(ctx, cs, false);
  const long long rows = (long long)s.n * s.p() * s.q();
  const size_t in_total = b.x.size();
  auto run_conv = [&](const bf16* x) { gpu::conv_forward(ctx, conv, x, b.w.get(), nullptr, b.y.get()); };
  auto run_stats = [&] { channel_stats(ctx, rows, s.k, b.y.get(), b.sum.get(), b.sqsum.get()); };
  auto run_sbr = [&] {
    scale_bias_relu<<<gpu::grid_for(in_total), 256, 0, ctx.stream()>>>(in_total, s.c, b.x.get(), b.scale.get(),
                                                                       b.bias.get(), b.activated.get());
    CONVOY_CUDA_CHECK_LAUNCH();
  };
  const double conv_ms = time_ms(ctx, [&] { run_conv(b.x.get()); });
  const double stats_ms = time_ms(ctx, run_stats);
  const double sbr_ms = time_ms(ctx, run_sbr);
  std::printf("  %-34s %8.3f ms\n", "unfused conv (ConvPlan)", conv_ms);
  std::printf("  %-34s %8.3f ms\n", "unfused stats (channels::sums)", stats_ms);
  std::printf("  %-34s %8.3f ms\n", "unfused conv + stats", conv_ms + stats_ms);
  std::printf("  %-34s %8.3f ms\n", "unfused sbr + conv", sbr_ms + conv_ms);
  std::printf("  %-34s %8.3f ms\n", "unfused sbr + conv + stats", sbr_ms + conv_ms + stats_ms);
  // The unfused sums each fused configuration is checked against.
  run_conv(b.x.get()), run_stats();
  const std::vector<float> conv_sums = b.sums(ctx);
  run_sbr(), run_conv(b.activated.get()), run_stats();
  const std::vector<float> sbr_sums = b.sums(ctx);
  auto scaled = [&](gpu::graph::SearchLimits l) {
    l.max_seconds *= search_scale;
    return l;
  };
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT, b16 = CUDNN_DATA_BFLOAT16, f16 = CUDNN_DATA_HALF;
  // Each pattern in the trainer's types (bf16), then in those of cudnn-frontend's samples (fp16), which
  // cuDNN's precompiled ConvBNfprop engine requires; scale-bias-ReLU-conv without statistics in bf16
  // (the generic runtime fusion engine's mainloop fusion), against sbr + conv.
  const gpu::graph::SearchLimits wide = scaled(kConvSearch), narrow = scaled(kOtherSearch);
  bench_pattern(ctx, s, FusedPattern::conv_genstats, {b16, f32, f32}, b, wide, &conv_sums, conv_ms + stats_ms);
  bench_pattern(ctx, s, FusedPattern::conv_genstats, {f16, f32, f16}, b, narrow, nullptr, conv_ms + stats_ms);
  const double sbrcs_ms = sbr_ms + conv_ms + stats_ms;
  bench_pattern(ctx, s, FusedPattern::scale_bias_relu_conv_genstats, {b16, f32, f32}, b, narrow, &sbr_sums, sbrcs_ms);
  bench_pattern(ctx, s, FusedPattern::scale_bias_relu_conv_genstats, {f16, f16, f16}, b, narrow, nullptr, sbrcs_ms);
  bench_pattern(ctx, s, FusedPattern::scale_bias_relu_conv, {b16, f32, f32}, b, narrow, nullptr, sbr_ms + conv_ms);
}

bool log_on = false;  // cuDNN's own log on stderr (CONVOY_CUDNN_LOG=1)

// What NVIDIA's sources say of the scale-bias-ReLU-conv-genstats pattern on Hopper, printed with the
// results so a refusal reads against it.
constexpr const char* kHopperNote =
    "note: cuDNN's graph API guide (docs.nvidia.com/deeplearning/cudnn/frontend/latest/developer/graph-api.html, "
    "Specialized Pre-Compiled Engines, ConvBNfprop): X, Z, W, scale and bias must all be FP16, intermediates "
    "virtual except Y, I/O 16-byte aligned, compute capability >= 8.0 but not 8.9, and on >= 9.0 only two "
    "patterns: scale + bias + ReLU + Conv + GenStats, and Conv + GenStats. The generic runtime fusion engine "
    "(Support Surface 90) takes BF16 and a pointwise prologue, but its epilogue holds pointwise operations and at "
    "most one reduction, no GenStats. cudnn-frontend's samples run SBRCS on Ampere and Hopper only, always in fp16 "
    "(samples/cpp/convolution/fprop.cpp TEST_CASE \"SBRCS\"; samples/legacy_samples/test_list.cpp \"Scale Bias "
    "Conv BNGenstats\")";

gpu::AlgoSearch parse_algos(int argc, char** argv) {
  const std::string a = argc > 1 ? argv[1] : "measure";
  if (a == "heuristic") return gpu::AlgoSearch::heuristic;
  if (a == "measure") return gpu::AlgoSearch::measure;
  if (a == "fastest") return gpu::AlgoSearch::fastest;
  fail(
      "fusion_bench [heuristic|measure|fastest] [search seconds scale]: the unfused convolution's algorithm "
      "choice, not '" +
      a + "' (or fusion_bench conv [net config] [search seconds scale]: plain convolutions, legacy against graph)");
}

int body(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "conv") return bench::conv_graph_bench(argc - 2, argv + 2);
  const gpu::AlgoSearch algos = parse_algos(argc, argv);
  const double search_scale = argc > 2 ? std::stod(argv[2]) : 1.0;
  if (!(search_scale > 0)) fail("fusion_bench: the search seconds scale must be positive");
  if (gpu_count() == 0) fail("fusion_bench: no CUDA device");
  gpu::Context ctx(0, size_t(256) << 20, gpu::MathMode::bf16);
  ctx.set_algo_search(algos);
  cudaDeviceProp prop{};
  CONVOY_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf(
      "fusion_bench: %s (sm_%d%d), cuDNN %zu, bf16 NHWC, batch %d, %d reps after %d warm-up; unfused conv: "
      "conv.cu's ConvPlan (%s algorithms); unfused stats: channels::sums with batch norm's moment terms (the "
      "kernels bn_forward_train runs); sbr: a plain scale-bias-ReLU pass; searched configurations: %d reps "
      "after %d warm-up; cuDNN's own log: %s\n",
      prop.name, prop.major, prop.minor, cudnnGetVersion(), kBatch, kReps, kWarmup, argc > 1 ? argv[1] : "measure",
      kSearchReps, kWarmup, log_on ? "on (stderr)" : "off, run with CONVOY_CUDNN_LOG=1");
  std::printf("%s\n", kHopperNote);
  for (const Case& c : cases()) bench_case(ctx, c, search_scale);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  log_on = convoy::gpu::cudnn_log_from_env();  // before any cuDNN call
  return convoy::run_main("fusion_bench", body, argc, argv);
}
