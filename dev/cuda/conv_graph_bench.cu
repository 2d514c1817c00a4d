// Milliseconds of each distinct convolution of a net (ResNet-50) at batch 256 through conv.cu's ConvPlan
// (legacy API, 'measure' and 'heuristic' algorithms) and through cuDNN's graph API (its engines searched).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "dev/cuda/conv_graph.h"
#include "dev/cuda/conv_graph_bench.h"
#include "dev/cuda/cuda_timing.cuh"
#include "dev/cuda/fused_conv_bn.h"
#include "shared/error.h"
#include "train/cuda/gpu_context.h"
#include "train/cuda/input_layout.h"
#include "train/layers/conv.h"
#include "train/net.h"

namespace convoy::bench {
namespace {

using gpu::bf16;
using gpu::ConvGraphShape;
using gpu::ConvPass;

constexpr int kBatch = 256, kWarmup = 3, kReps = 10;
constexpr size_t kWorkspace = size_t(256) << 20;  // the Context's, which bounds ConvPlan's algorithms too
// The searches share this many seconds (times the scale argument); each gets at most kSearchSeconds of
// it, builds at most one runtime-compiled plan (a second of compiling each), and takes the heuristics'
// first kPerMode picks per mode before every engine by index with its default knobs.
// Once a search's share is under kCompileShare seconds, it builds no runtime-compiled plan.
constexpr double kSearchBudget = 40, kSearchSeconds = 1.0, kCompileShare = 0.4;
constexpr int kMaxPlans = 24, kPerMode = 3;
constexpr double kMatch = 1e-2;  // relative L2 of a graph result against ConvPlan's

// One distinct convolution of the net: its first layer's name, how often it occurs, the shape as
// the net has it, and as cuDNN sees it (the stem reads the input as 2x2 blocks, as GpuNet stores it).
struct ConvCase {
  std::string name;
  int count = 0;
  bool stem = false;  // the net's first layer: space to depth, no input gradient
  ConvShape net;
  gpu::InputLayout input;  // the stem's stored input
  ConvGraphShape graph;
};

ConvCase case_of(const Node& nd) {
  ConvCase c;
  c.name = nd.spec.name, c.stem = nd.in[0] < 0, c.net = conv_shape(nd, kBatch);
  const ConvShape& s = c.net;
  c.graph = {s.n, s.h_in, s.w_in, s.c_in, s.c_out, s.kh, s.kw, s.stride, s.pad};
  if (c.stem) {
    c.input = gpu::space_to_depth_input(s.c_in, s.h_in, s.w_in, s.kh, s.pad);
    const int kb = (s.kh + 1) / 2;
    c.graph = {s.n, c.input.h_stored, c.input.w_stored, c.input.c_stored, s.c_out, kb, kb, 1, 0};
  }
  return c;
}

// The net's convolutions, one case per distinct shape in the order first met, counted.
std::vector<ConvCase> net_cases(const std::string& path) {
  const NetConfig cfg = read_net_config(path);
  const Net net(cfg, Dims{cfg.input_c, cfg.input_h, cfg.input_w});
  std::vector<ConvCase> cases;
  std::map<std::tuple<bool, int, int, int, int, int, int, int>, size_t> index;
  for (const Node& nd : net.nodes()) {
    if (std::string(nd.op().type()) != "conv") continue;
    const ConvCase c = case_of(nd);
    const ConvShape& s = c.net;
    if (s.groups != 1) fail("fusion_bench conv: grouped convolutions are not benchmarked ('" + c.name + "')");
    const auto key = std::make_tuple(c.stem, s.c_in, s.h_in, s.w_in, s.c_out, s.kh, s.stride, s.pad);
    auto it = index.find(key);
    if (it == index.end()) it = index.emplace(key, cases.size()).first, cases.push_back(c);
    ++cases[it->second].count;
  }
  return cases;
}

double time_ms(gpu::Context& ctx, const std::function<void()>& f, int reps = kReps, int warmup = kWarmup) {
  return event_ms(ctx, f, reps, warmup);
}

// Uniform values in [-scale, scale) from a hash of the index, the same on every run.
template <typename T>
__global__ void fill_uniform(size_t n, unsigned seed, float scale, T* out) {
  CONVOY_GRID_STRIDE(i, n) {
    unsigned h = unsigned(i) * 2654435761u ^ seed;
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13, h *= 3266489917u, h ^= h >> 16;
    out[i] = T(scale * (float(h >> 8) / float(1 << 23) - 1.f));
  }
}

// sums[0] += (got - want)^2, sums[1] += want^2, over n values.
template <typename T>
__global__ void l2_terms(size_t n, const T* got, const bf16* want, double* sums) {
  double d = 0, w = 0;
  CONVOY_GRID_STRIDE(i, n) {
    const double g = double(float(got[i])), r = double(__bfloat162float(want[i]));
    d += (g - r) * (g - r), w += r * r;
  }
  atomicAdd(&sums[0], d), atomicAdd(&sums[1], w);
}

// The tensors of one case: inputs, ConvPlan's results (the references) and the graph's.
struct Tensors {
  gpu::DeviceBuffer<bf16> x, w, dy, y_ref, dx_ref, dw_ref, out;  // out: the graph's y or dx, or a bf16 dw
  gpu::DeviceBuffer<float> dw32;                                 // the graph's fp32 dw, and the trainer's
  gpu::DeviceBuffer<double> sums{2};
  Tensors(const ConvGraphShape& s, cudaStream_t stream)
      : x(size_t(s.n) * s.h * s.w * s.c), w(size_t(s.k) * s.r * s.s * s.c), dy(size_t(s.n) * s.p() * s.q() * s.k),
        y_ref(dy.size()), dx_ref(x.size()), dw_ref(w.size()), out(std::max(x.size(), dy.size())), dw32(w.size()) {
    fill(stream, x, 1, 1.f), fill(stream, dy, 2, 1.f), fill(stream, w, 3, 1.f / std::sqrt(float(s.c * s.r * s.s)));
  }
  static void fill(cudaStream_t stream, gpu::DeviceBuffer<bf16>& b, unsigned seed, float scale) {
    fill_uniform<<<gpu::grid_for(b.size()), 256, 0, stream>>>(b.size(), seed * 0x9e3779b9u, scale, b.get());
    CONVOY_CUDA_CHECK_LAUNCH();
  }
};

// Relative L2 distance of got (n values of T) from want.
template <typename T>
double rel_l2(gpu::Context& ctx, Tensors& t, const T* got, const bf16* want, size_t n) {
  CONVOY_CUDA_CHECK(cudaMemsetAsync(t.sums.get(), 0, 2 * sizeof(double), ctx.stream()));
  l2_terms<<<gpu::grid_for(n), 256, 0, ctx.stream()>>>(n, got, want, t.sums.get());
  CONVOY_CUDA_CHECK_LAUNCH();
  ctx.synchronize();
  double s[2];
  t.sums.download(s, 2);
  return s[1] > 0 ? std::sqrt(s[0] / s[1]) : (s[0] > 0 ? INFINITY : 0);
}

// ConvPlan's passes. Backward data and filter are its cuDNN calls alone (conv_backward runs both,
// and widens dw); bwd_filter_widened is what the trainer pays for its fp32 dw.
struct Legacy {
  gpu::ConvPlan& plan;
  void fwd(gpu::Context& ctx, Tensors& t) const {
    gpu::conv_forward(ctx, plan, t.x.get(), t.w.get(), nullptr, t.y_ref.get());
  }
  void bwd_data(gpu::Context& ctx, Tensors& t) const {
    const float one = 1.f, zero = 0.f;
    CONVOY_CUDNN_CHECK(cudnnConvolutionBackwardData(ctx.cudnn(), &one, plan.w_, t.w.get(), plan.y_, t.dy.get(),
                                                    plan.conv_, plan.bwd_data_, ctx.workspace(), ctx.workspace_bytes(),
                                                    &zero, plan.x_, t.dx_ref.get()));
  }
  void bwd_filter(gpu::Context& ctx, Tensors& t) const {
    const float one = 1.f, zero = 0.f;
    CONVOY_CUDNN_CHECK(cudnnConvolutionBackwardFilter(ctx.cudnn(), &one, plan.x_, t.x.get(), plan.y_, t.dy.get(),
                                                      plan.conv_, plan.bwd_filter_, ctx.workspace(),
                                                      ctx.workspace_bytes(), &zero, plan.w_, t.dw_ref.get()));
  }
  void bwd_filter_widened(gpu::Context& ctx, Tensors& t) const {
    gpu::conv_backward(ctx, plan, t.x.get(), t.w.get(), t.dy.get(), nullptr, t.dw32.get(), nullptr, t.dw_ref.get());
  }
  int algo(ConvPass p) const {
    return p == ConvPass::forward         ? int(plan.fwd_)
           : p == ConvPass::backward_data ? int(plan.bwd_data_)
                                          : int(plan.bwd_filter_);
  }
  void run(gpu::Context& ctx, Tensors& t, ConvPass p) const {
    p == ConvPass::forward ? fwd(ctx, t) : p == ConvPass::backward_data ? bwd_data(ctx, t) : bwd_filter(ctx, t);
  }
};

// One pass's figures for one case.
struct PassResult {
  double measure = -1, heuristic = -1, graph = -1;  // ms; -1: not run
  double widened = -1;                              // bwd-filter: ConvPlan (measure) with its widening pass
  int algo_measure = -1, algo_heuristic = -1;       // ConvPlan's cuDNN algorithm numbers for the pass
  std::string graph_text, check, search_text;
};

// The search's state across all cases: the seconds left and the searches still to come.
struct Budget {
  double seconds = kSearchBudget, used = 0;
  int searches = 0;
  gpu::graph::SearchLimits next() const {
    gpu::graph::SearchLimits l;
    const double share = seconds / std::max(searches, 1);
    l.max_plans = kMaxPlans, l.per_mode = kPerMode, l.heuristics_first = true;
    l.max_runtime_compiled = share >= kCompileShare ? 1 : 0;
    l.max_seconds = std::max(0.05, std::min(kSearchSeconds, share));
    return l;
  }
};

// The graph pass's output where it writes one of t's buffers, and its type.
void* graph_output(Tensors& t, ConvPass p, cudnnDataType_t out) {
  if (p == ConvPass::backward_filter && out == CUDNN_DATA_FLOAT) return t.dw32.get();
  return t.out.get();
}

// The relative L2 distance of the graph's output from ConvPlan's.
double check_output(gpu::Context& ctx, Tensors& t, ConvPass p, cudnnDataType_t out) {
  if (p == ConvPass::forward) return rel_l2(ctx, t, t.out.get(), t.y_ref.get(), t.y_ref.size());
  if (p == ConvPass::backward_data) return rel_l2(ctx, t, t.out.get(), t.dx_ref.get(), t.dx_ref.size());
  if (out == CUDNN_DATA_FLOAT) return rel_l2(ctx, t, t.dw32.get(), t.dw_ref.get(), t.dw_ref.size());
  return rel_l2(ctx, t, t.out.get(), t.dw_ref.get(), t.dw_ref.size());
}

// Times every plan the search built (one probing run first: a plan over 3x the reference is not
// timed further), checks each faster one's output against ConvPlan's, and keeps the fastest that
// matches in r.
void time_search(gpu::Context& ctx, Tensors& t, gpu::ConvGraphPlan& gp, gpu::graph::PlanSearch& found, double reference,
                 PassResult& r) {
  const ConvPass p = gp.pass();
  const gpu::ConvGraphTensors io{p == ConvPass::backward_data ? graph_output(t, p, gp.types().out) : t.x.get(),
                                 p == ConvPass::backward_filter ? graph_output(t, p, gp.types().out) : t.w.get(),
                                 p == ConvPass::forward ? graph_output(t, p, gp.types().out) : t.dy.get()};
  void* out = graph_output(t, p, gp.types().out);
  const size_t out_count = p == ConvPass::forward         ? t.dy.size()
                           : p == ConvPass::backward_data ? t.x.size()
                                                          : t.w.size();
  const size_t out_bytes = out_count * (gp.types().out == CUDNN_DATA_FLOAT ? sizeof(float) : sizeof(bf16));
  for (gpu::graph::Plan& plan : found.plans) {
    const std::string text = plan.engine().text() + " [" + plan.origin() + "], workspace " +
                             std::to_string(plan.workspace_bytes());
    gp.use(std::move(plan));
    gpu::DeviceBuffer<unsigned char> ws(std::max<size_t>(size_t(gp.plan().workspace_bytes()), 1));
    auto run = [&] { gp.run(ctx.cudnn(), ctx.stream(), io, ws.get()); };
    CONVOY_CUDA_CHECK(cudaMemsetAsync(out, 0xff, out_bytes, ctx.stream()));  // NaN: unwritten fails
    double ms = 0;
    try {
      ms = time_ms(ctx, run, 1, 1);
      if (ms < 3 * reference) ms = time_ms(ctx, run);
    } catch (const Error& e) {
      std::printf("    %s: RUN FAILED: %s  %s\n", gpu::pass_name(p), e.what(), text.c_str());
      continue;
    }
    if (r.graph >= 0 && ms >= r.graph) continue;
    const double d = check_output(ctx, t, p, gp.types().out);
    char line[64];
    std::snprintf(line, sizeof line, "%s (rel L2 %.1e)", d < kMatch ? "matches" : "DIFFERS", d);
    if (!(d < kMatch)) {
      std::printf("    %s: %.3f ms but %s: %s\n", gpu::pass_name(p), ms, line, text.c_str());
      continue;
    }
    r.graph = ms, r.graph_text = text, r.check = line;
  }
}

// The graph API's fastest matching plan for one pass; the filter gradient in fp32 where cuDNN builds
// any plan for it, else in bf16 as ConvPlan writes it.
void graph_pass(gpu::Context& ctx, Tensors& t, const ConvCase& c, ConvPass p, double reference, Budget& budget,
                PassResult& r) {
  std::vector<cudnnDataType_t> outs{CUDNN_DATA_BFLOAT16};
  if (p == ConvPass::backward_filter) outs.insert(outs.begin(), CUDNN_DATA_FLOAT);
  for (cudnnDataType_t out : outs) {
    gpu::ConvGraphPlan gp(ctx.cudnn(), p, c.graph, {CUDNN_DATA_BFLOAT16, out});
    const auto start = std::chrono::steady_clock::now();
    const gpu::graph::SearchLimits limits = budget.next();
    gpu::graph::PlanSearch found = gp.search(ctx.cudnn(), int64_t(kWorkspace), limits);
    const double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    budget.seconds -= spent, budget.used += spent;
    r.search_text += std::string(r.search_text.empty() ? "" : "; ") + "out " + gpu::type_name(out) + ": " +
                     std::to_string(found.plans.size()) + " built, " + std::to_string(found.refusals.size()) +
                     " refused, " + std::to_string(found.not_tried) + " not tried of " +
                     std::to_string(found.global_count) + " engines";
    if (found.plans.empty() && !found.refusals.empty())
      r.search_text += " (first refusal: " + found.refusals.front() + ")";
    time_search(ctx, t, gp, found, reference, r);
    if (r.graph >= 0) break;
  }
  --budget.searches;
}

// Sums over the net, each shape's figures times its count.
struct Totals {
  double measure = 0, heuristic = 0, graph = 0, best = 0;
  int missing = 0;  // passes without a graph result (counted at ConvPlan's measure time)
  void add(const PassResult& r, int count) {
    measure += count * r.measure, heuristic += count * r.heuristic;
    const double g = r.graph >= 0 ? r.graph : r.measure;
    graph += count * g, best += count * std::min(g, r.measure);
    if (r.graph < 0) ++missing;
  }
  void add(const Totals& o) {
    measure += o.measure, heuristic += o.heuristic, graph += o.graph, best += o.best, missing += o.missing;
  }
  void print(const char* what) const {
    std::printf("  %-22s %9.3f %10.3f %9.3f %8.2fx %8.2fx %14.3f%s\n", what, measure, heuristic, graph, measure / graph,
                heuristic / graph, best,
                missing ? (" (" + std::to_string(missing) + " passes without a graph plan)").c_str() : "");
  }
};

void print_pass(ConvPass p, const PassResult& r) {
  std::printf("  %-10s  measure %8.3f (algo %d)  heuristic %8.3f (algo %d)  graph ", gpu::pass_name(p), r.measure,
              r.algo_measure, r.heuristic, r.algo_heuristic);
  if (r.graph < 0)
    std::printf("    none  %s\n", r.search_text.c_str());
  else
    std::printf("%8.3f  %5.2fx / %5.2fx  %s  %s; %s\n", r.graph, r.measure / r.graph, r.heuristic / r.graph,
                r.check.c_str(), r.graph_text.c_str(), r.search_text.c_str());
  if (r.widened >= 0)
    std::printf("  %-10s  ConvPlan (measure) with its widening to the trainer's fp32 dw: %.3f ms\n", "", r.widened);
}

// One case: ConvPlan timed with heuristic then measure algorithms (the references come from the
// last), then the graph API's best per pass; adds the figures to the forward and backward totals.
void bench_case(gpu::Context& ctx, const ConvCase& c, Budget& budget, Totals& fwd, Totals& bwd) {
  std::printf("%s x%d%s: %s\n", c.name.c_str(), c.count,
              c.stem ? " (stem, input as 2x2 blocks as GpuNet stores it)" : "", c.graph.text().c_str());
  std::fflush(stdout);
  Tensors t(c.graph, ctx.stream());
  std::vector<ConvPass> passes{ConvPass::forward, ConvPass::backward_data, ConvPass::backward_filter};
  if (c.stem) passes.erase(passes.begin() + 1);  // the first layer needs no input gradient
  std::map<ConvPass, PassResult> results;
  for (gpu::AlgoSearch mode : {gpu::AlgoSearch::heuristic, gpu::AlgoSearch::measure}) {
    ctx.set_algo_search(mode);
    gpu::ConvPlan plan(ctx, c.net, !c.stem, c.stem ? c.input.c_stored : 0,
                       c.stem ? InputFold::blocks : InputFold::none);
    const Legacy legacy{plan};
    for (ConvPass p : passes) {
      const double ms = time_ms(ctx, [&] { legacy.run(ctx, t, p); });
      const bool measured = mode == gpu::AlgoSearch::measure;
      (measured ? results[p].measure : results[p].heuristic) = ms;
      (measured ? results[p].algo_measure : results[p].algo_heuristic) = legacy.algo(p);
    }
    if (mode == gpu::AlgoSearch::measure)
      results[ConvPass::backward_filter].widened = time_ms(ctx, [&] { legacy.bwd_filter_widened(ctx, t); });
  }
  for (ConvPass p : passes) {
    PassResult& r = results[p];
    graph_pass(ctx, t, c, p, r.measure, budget, r);
    print_pass(p, r);
    Totals one;
    one.add(r, c.count);
    (p == ConvPass::forward ? fwd : bwd).add(one);
  }
  std::fflush(stdout);
}

}  // namespace

int conv_graph_bench(int argc, char** argv) {
  const std::string path = argc > 0 ? argv[0] : "configs/resnet50.toml";
  const double scale = argc > 1 ? std::stod(argv[1]) : 1.0;
  if (!(scale > 0)) fail("fusion_bench conv: the search seconds scale must be positive");
  const std::vector<ConvCase> cases = net_cases(path);
  gpu::Context ctx(0, kWorkspace, gpu::MathMode::bf16);
  Budget budget;
  budget.seconds *= scale;
  const auto start = std::chrono::steady_clock::now();
  int convs = 0;
  for (const ConvCase& c : cases) budget.searches += c.stem ? 2 : 3, convs += c.count;
  std::printf(
      "fusion_bench conv: %s, %zu distinct convolutions of %d, batch %d, bf16 NHWC, KRSC filters, fp32 compute; "
      "cuDNN %zu; ms per pass from events around %d reps after %d warm-up (a graph plan over 3x ConvPlan's "
      "measure time: one run); legacy: conv.cu's ConvPlan with 'measure' and 'heuristic' algorithms, backward "
      "passes as their cuDNN calls alone; graph: the fastest of each search (heuristics' first %d per mode, then "
      "each engine with default knobs; at most %d plans, one runtime-compiled, %.0f s shared) whose output is "
      "within relative L2 %.0e of ConvPlan's; speed-ups: graph over measure / over heuristic\n",
      path.c_str(), cases.size(), convs, kBatch, cudnnGetVersion(), kReps, kWarmup, kPerMode, kMaxPlans, budget.seconds,
      kMatch);
  Totals fwd, bwd;
  for (const ConvCase& c : cases) bench_case(ctx, c, budget, fwd, bwd);
  Totals all = fwd;
  all.add(bwd);
  std::printf("totals over the net, each shape times its count (ms per step at batch %d):\n", kBatch);
  std::printf("  %-22s %9s %10s %9s %9s %9s %14s\n", "", "measure", "heuristic", "graph", "x meas", "x heur",
              "best per pass");
  fwd.print("forward");
  bwd.print("backward (data+filter)");
  all.print("all");
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  std::printf("fusion_bench conv: %.1f s, of which searches %.1f s\n", took.count(), budget.used);
  return 0;
}

}  // namespace convoy::bench
