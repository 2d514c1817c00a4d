// Milliseconds of cuDNN's fused convolution + batch-norm statistics (train/cuda/fused_conv_bn.h)
// against the unfused passes the trainer runs today, for ResNet shapes at batch 256 on one GPU.
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "shared/error.h"
#include "train/cuda/channels.cuh"
#include "train/cuda/fused_conv_bn.h"
#include "train/gpu_context.h"
#include "train/gpu_info.h"
#include "train/layers/conv.h"

namespace {

using namespace convoy;
using gpu::bf16;
using gpu::FusedConvShape;
using gpu::FusedPattern;

constexpr int kBatch = 256, kWarmup = 3, kReps = 20;

struct Case {
  const char* name;
  FusedConvShape shape;
};

std::vector<Case> cases() {
  return {
      {"resnet50 layer1 1x1 256->64 @56", {kBatch, 56, 56, 256, 64, 1, 1, 1, 0}},
      {"resnet50 layer1 3x3 64->64 @56", {kBatch, 56, 56, 64, 64, 3, 3, 1, 1}},
      {"resnet50 layer1 1x1 64->256 @56", {kBatch, 56, 56, 64, 256, 1, 1, 1, 0}},
      {"resnet50 layer2 3x3/2 128->128 56->28", {kBatch, 56, 56, 128, 128, 3, 3, 2, 1}},
      {"resnet50 layer3 1x1 1024->256 @14", {kBatch, 14, 14, 1024, 256, 1, 1, 1, 0}},
      {"resnet18 layer1 3x3 64->64 @56", {kBatch, 56, 56, 64, 64, 3, 3, 1, 1}},
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
  __device__ void begin_pack(int) {}
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

// Milliseconds per call of f, from events around kReps calls after kWarmup.
double time_ms(gpu::Context& ctx, const std::function<void()>& f) {
  for (int i = 0; i < kWarmup; ++i) f();
  CudaEvent start, stop;
  CONVOY_CUDA_CHECK(cudaEventRecord(start.get(), ctx.stream()));
  for (int i = 0; i < kReps; ++i) f();
  CONVOY_CUDA_CHECK(cudaEventRecord(stop.get(), ctx.stream()));
  CONVOY_CUDA_CHECK(cudaEventSynchronize(stop.get()));
  float ms = 0;
  CONVOY_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
  return double(ms) / kReps;
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
    CONVOY_CUDA_CHECK(cudaMemset(scale.get(), 0, scale.size() * sizeof(float)));
    CONVOY_CUDA_CHECK(cudaMemset(bias.get(), 0, bias.size() * sizeof(float)));
  }
};

// Times one fused plan if cuDNN built it; prints its line either way. Returns its ms, or -1.
double time_fused(gpu::Context& ctx, const gpu::FusedConvPlan& plan, Buffers& b, const char* label) {
  if (!plan.built()) {
    std::printf("  %-34s not built: %s\n", label, plan.support().why.c_str());
    return -1;
  }
  gpu::DeviceBuffer<unsigned char> ws(std::max<size_t>(size_t(plan.workspace_bytes()), 1));
  gpu::FusedConvTensors t;
  t.x = b.x.get(), t.w = b.w.get(), t.y = b.y.get(), t.sum = b.sum.get(), t.sqsum = b.sqsum.get();
  t.scale = b.scale.get(), t.bias = b.bias.get();
  const double ms = time_ms(ctx, [&] { plan.run(ctx.cudnn(), ctx.stream(), t, ws.get()); });
  std::printf("  %-34s %8.3f ms  (%s, workspace %lld bytes)\n", label, ms, plan.engine().text().c_str(),
              (long long)plan.workspace_bytes());
  return ms;
}

void bench_case(gpu::Context& ctx, const Case& c) {
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
  const int64_t limit = int64_t(1) << 30;
  const double fused = time_fused(ctx, gpu::FusedConvPlan(ctx.cudnn(), FusedPattern::conv_genstats, s, limit), b,
                                  "fused ConvGenstats");
  if (fused > 0) std::printf("  %-34s %8.2fx\n", "speed-up over conv + stats", (conv_ms + stats_ms) / fused);
  std::printf("  %-34s %8.3f ms\n", "unfused sbr + conv + stats", sbr_ms + conv_ms + stats_ms);
  const double sbrcs = time_fused(
      ctx, gpu::FusedConvPlan(ctx.cudnn(), FusedPattern::scale_bias_relu_conv_genstats, s, limit, CUDNN_DATA_FLOAT), b,
      "fused ScaleBiasReluConvGenstats");
  if (sbrcs > 0)
    std::printf("  %-34s %8.2fx\n", "speed-up over sbr + conv + stats", (sbr_ms + conv_ms + stats_ms) / sbrcs);
}

gpu::AlgoSearch parse_algos(int argc, char** argv) {
  const std::string a = argc > 1 ? argv[1] : "measure";
  if (a == "heuristic") return gpu::AlgoSearch::heuristic;
  if (a == "measure") return gpu::AlgoSearch::measure;
  if (a == "fastest") return gpu::AlgoSearch::fastest;
  fail("fusion_bench [heuristic|measure|fastest]: the unfused convolution's algorithm choice, not '" + a + "'");
}

int body(int argc, char** argv) {
  const gpu::AlgoSearch algos = parse_algos(argc, argv);
  if (gpu_count() == 0) fail("fusion_bench: no CUDA device");
  gpu::Context ctx(0, size_t(256) << 20, gpu::MathMode::bf16);
  ctx.set_algo_search(algos);
  cudaDeviceProp prop{};
  CONVOY_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf(
      "fusion_bench: %s (sm_%d%d), cuDNN %zu, bf16 NHWC, batch %d, %d reps after %d warm-up; unfused conv: "
      "conv.cu's ConvPlan (%s algorithms); unfused stats: channels::sums with batch norm's moment terms (the "
      "kernels bn_forward_train runs); sbr: a plain scale-bias-ReLU pass; fused scale/bias fp32\n",
      prop.name, prop.major, prop.minor, cudnnGetVersion(), kBatch, kReps, kWarmup, argc > 1 ? argv[1] : "measure");
  for (const Case& c : cases()) bench_case(ctx, c);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return convoy::run_main("fusion_bench", body, argc, argv); }
