// cuDNN's graph API made RAII (cudnn_graph.h): descriptors, the builders of fused graphs, a plan
// picked by heuristics and the search over every configuration, with cuDNN's refusals kept as reasons.
#include <algorithm>
#include <array>
#include <cfloat>
#include <chrono>
#include <set>
#include <string>

#include "dev/cuda/cudnn_graph.h"
#include "train/cuda/gpu_context.h"

namespace convoy::gpu::graph {
namespace {

std::string last_error() {
  char text[1024] = {};
  cudnnGetLastErrorString(text, sizeof text);
  return text;
}

// The engine behind a configuration: its global index and whether cuDNN notes it nondeterministic.
void read_engine(const Descriptor& config, EngineInfo& info) {
  Descriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t raw = engine.get();
  int64_t got = 0;
  CONVOY_CUDNN_CHECK(cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                              1, &got, &raw));
  CONVOY_CUDNN_CHECK(
      cudnnBackendGetAttribute(raw, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &got, &info.global_index));
  std::array<cudnnBackendNumericalNote_t, CUDNN_NUMERICAL_NOTE_TYPE_COUNT> notes{};
  CONVOY_CUDNN_CHECK(cudnnBackendGetAttribute(raw, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                              int64_t(notes.size()), &got, notes.data()));
  info.deterministic = true;
  for (int64_t i = 0; i < got; ++i)
    if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) info.deterministic = false;
  // The behaviour notes only inform: an engine that does not give them is taken as precompiled.
  std::array<cudnnBackendBehaviorNote_t, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT> behaviour{};
  if (cudnnBackendGetAttribute(raw, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                               int64_t(behaviour.size()), &got, behaviour.data()) != CUDNN_STATUS_SUCCESS)
    got = 0;
  info.runtime_compiled = false;
  for (int64_t i = 0; i < got; ++i)
    if (behaviour[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) info.runtime_compiled = true;
}

// The configuration's knob choices as "type=value" pairs (cudnnBackendKnobType_t numbers).
std::string read_knobs(const Descriptor& config) {
  std::vector<Descriptor> knobs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int i = 0; i < CUDNN_KNOB_TYPE_COUNTS; ++i) {
    knobs.emplace_back(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
    raw.push_back(knobs.back().get());
  }
  int64_t got = 0;
  CONVOY_CUDNN_CHECK(cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(raw.size()), &got, raw.data()));
  std::string text;
  for (int64_t i = 0; i < got && i < int64_t(raw.size()); ++i) {
    cudnnBackendKnobType_t type{};
    int64_t value = 0, n = 0;
    CONVOY_CUDNN_CHECK(
        cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &n, &type));
    CONVOY_CUDNN_CHECK(
        cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &n, &value));
    text += (text.empty() ? "" : " ") + std::to_string(int(type)) + "=" + std::to_string(value);
  }
  return text;
}

const char* mode_name(cudnnBackendHeurMode_t m) {
  switch (m) {
    case CUDNN_HEUR_MODE_INSTANT: return "instant";
    case CUDNN_HEUR_MODE_A: return "A";
    case CUDNN_HEUR_MODE_FALLBACK: return "fallback";
    case CUDNN_HEUR_MODE_B: return "B";
    default: return "?";
  }
}

// The engine configurations heuristics of one mode rank for the graph, best first; none (with the
// reason in `why`) where the mode refuses the graph.
std::vector<Descriptor> ranked_configs(const Descriptor& op_graph, cudnnBackendHeurMode_t mode, std::string& why) {
  Descriptor heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, op_graph).set(CUDNN_ATTR_ENGINEHEUR_MODE, mode);
  const Support s = heur.try_finalize(std::string("heuristics (mode ") + mode_name(mode) + ")");
  if (!s.ok) {
    why += "\n  " + s.why;
    return {};
  }
  int64_t count = 0;
  CONVOY_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                              0, &count, nullptr));
  std::vector<Descriptor> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(configs.back().get());
  }
  int64_t got = 0;
  if (count > 0)
    CONVOY_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, raw.data()));
  configs.resize(size_t(std::min(got, count)));
  if (configs.empty()) why += std::string("\n  heuristics (mode ") + mode_name(mode) + "): no engine configuration";
  return configs;
}

}  // namespace

std::string refusal_text(const std::string& what, cudnnStatus_t rc) {
  std::string text = what + ": " + cudnnGetErrorString(rc);
  const std::string more = last_error();
  if (!more.empty()) text += " (" + more + ")";
  return text;
}

Descriptor::Descriptor(cudnnBackendDescriptorType_t type) {
  CONVOY_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d_));
}

Descriptor::~Descriptor() {
  if (d_) cudnnBackendDestroyDescriptor(d_);
}

Descriptor& Descriptor::operator=(Descriptor&& o) noexcept {
  if (this != &o) {
    if (d_) cudnnBackendDestroyDescriptor(d_);
    d_ = std::exchange(o.d_, nullptr);
  }
  return *this;
}

Descriptor& Descriptor::set_raw(cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t count,
                                const void* v) {
  // The check's message names the call; the attribute and cuDNN's own words say which one failed.
  try {
    CONVOY_CUDNN_CHECK(cudnnBackendSetAttribute(d_, a, t, count, v));
  } catch (const Error& e) {
    fail(std::string(e.what()) + " (attribute " + std::to_string(int(a)) + ", " + last_error() + ")");
  }
  return *this;
}

Descriptor& Descriptor::set(cudnnBackendAttributeName_t a, const Descriptor& d) {
  cudnnBackendDescriptor_t raw = d.get();
  return set_raw(a, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
}

Descriptor& Descriptor::set(cudnnBackendAttributeName_t a, const std::vector<const Descriptor*>& ds) {
  std::vector<cudnnBackendDescriptor_t> raw;
  for (const Descriptor* d : ds) raw.push_back(d->get());
  return set_raw(a, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(raw.size()), raw.data());
}

Descriptor& Descriptor::set_pointers(cudnnBackendAttributeName_t a, const std::vector<void*>& p) {
  return set_raw(a, CUDNN_TYPE_VOID_PTR, int64_t(p.size()), p.data());
}

Descriptor& Descriptor::finalize() {
  try {
    CONVOY_CUDNN_CHECK(cudnnBackendFinalize(d_));
  } catch (const Error& e) {
    fail(std::string(e.what()) + " (" + last_error() + ")");
  }
  return *this;
}

Support Descriptor::try_finalize(const std::string& what) {
  const cudnnStatus_t rc = cudnnBackendFinalize(d_);
  if (rc == CUDNN_STATUS_SUCCESS) return {};
  return Support::refused(refusal_text(what, rc));
}

Descriptor nhwc_tensor(int64_t uid, cudnnDataType_t type, int64_t n, int64_t c, int64_t h, int64_t w, bool is_virtual) {
  Descriptor t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, type)
      .set(CUDNN_ATTR_TENSOR_DIMENSIONS, std::vector<int64_t>{n, c, h, w})
      .set(CUDNN_ATTR_TENSOR_STRIDES, std::vector<int64_t>{h * w * c, 1, w * c, c})
      .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid)
      .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, int64_t(16));  // cudaMalloc'd and arena buffers: 256
  if (is_virtual) t.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, true);
  return std::move(t.finalize());
}

Descriptor channel_vector(int64_t uid, cudnnDataType_t type, int64_t c) { return nhwc_tensor(uid, type, 1, c, 1, 1); }

Descriptor scalar_by_value(int64_t uid, cudnnDataType_t type) {
  Descriptor t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, type)
      .set(CUDNN_ATTR_TENSOR_DIMENSIONS, std::vector<int64_t>{1, 1, 1, 1})
      .set(CUDNN_ATTR_TENSOR_STRIDES, std::vector<int64_t>{1, 1, 1, 1})
      .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid)
      .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, int64_t(16))
      .set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, true);
  return std::move(t.finalize());
}

Descriptor convolution(int64_t pad, int64_t stride) {
  Descriptor c(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  c.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_DATA_FLOAT)
      .set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_CROSS_CORRELATION)
      .set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, int64_t(2))
      .set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, std::vector<int64_t>{pad, pad})
      .set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, std::vector<int64_t>{pad, pad})
      .set(CUDNN_ATTR_CONVOLUTION_DILATIONS, std::vector<int64_t>{1, 1})
      .set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, std::vector<int64_t>{stride, stride});
  return std::move(c.finalize());
}

Descriptor conv_forward_op(const Descriptor& x, const Descriptor& w, const Descriptor& y, const Descriptor& conv) {
  Descriptor op(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, x)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, w)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, y)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, conv)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, 1.f)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, 0.f);
  return std::move(op.finalize());
}

Descriptor conv_backward_data_op(const Descriptor& dy, const Descriptor& w, const Descriptor& dx,
                                 const Descriptor& conv) {
  Descriptor op(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, dy)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, w)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, dx)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, conv)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, 1.f)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, 0.f);
  return std::move(op.finalize());
}

Descriptor conv_backward_filter_op(const Descriptor& x, const Descriptor& dy, const Descriptor& dw,
                                   const Descriptor& conv) {
  Descriptor op(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, x)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, dy)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, dw)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, conv)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, 1.f)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA, 0.f);
  return std::move(op.finalize());
}

Descriptor pointwise(cudnnPointwiseMode_t mode) {
  Descriptor pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  pw.set(CUDNN_ATTR_POINTWISE_MODE, mode).set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_DATA_FLOAT);
  if (mode == CUDNN_POINTWISE_RELU_FWD || mode == CUDNN_POINTWISE_RELU_BWD) {
    const cudnnNanPropagation_t nan = CUDNN_PROPAGATE_NAN;
    CONVOY_CUDNN_CHECK(
        cudnnBackendSetAttribute(pw.get(), CUDNN_ATTR_POINTWISE_NAN_PROPAGATION, CUDNN_TYPE_NAN_PROPOGATION, 1, &nan));
    pw.set(CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP, 0.0)
        .set(CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP, double(FLT_MAX))
        .set(CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP_SLOPE, 0.0);
  }
  return std::move(pw.finalize());
}

Descriptor pointwise_op(const Descriptor& pointwise, const Descriptor& x, const Descriptor* b, const Descriptor& y) {
  Descriptor op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pointwise)
      .set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x)
      .set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
  if (b) op.set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b);
  return std::move(op.finalize());
}

Descriptor genstats_op(const Descriptor& x, const Descriptor& sum, const Descriptor& sqsum, cudnnDataType_t math_prec) {
  Descriptor op(CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_GENSTATS_SUM_SQSUM)
      .set(CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, math_prec)
      .set(CUDNN_ATTR_OPERATION_GENSTATS_XDESC, x)
      .set(CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, sum)
      .set(CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, sqsum);
  return std::move(op.finalize());
}

Descriptor operation_graph(cudnnHandle_t h, const std::vector<const Descriptor*>& ops) {
  Descriptor g(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  g.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, ops).set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, h);
  return g;
}

std::string EngineInfo::text() const {
  return "engine " + std::to_string(global_index) + " (knobs " + (knobs.empty() ? "none" : knobs) + ", " +
         (deterministic ? "deterministic" : "nondeterministic") + (runtime_compiled ? ", runtime compiled" : "") + ")";
}

Plan& Plan::operator=(Plan&& o) noexcept {
  if (this != &o) {
    plan_ = std::move(o.plan_);
    config_ = std::move(o.config_);
    engine_desc_ = std::move(o.engine_desc_);
    kept_ = std::move(o.kept_);
    workspace_ = o.workspace_;
    engine_ = std::move(o.engine_);
    origin_ = std::move(o.origin_);
  }
  return *this;
}

Support Plan::build_config(cudnnHandle_t h, Descriptor&& config, Descriptor&& engine, std::string origin,
                           int64_t max_workspace) {
  EngineInfo info;
  read_engine(config, info);
  info.knobs = read_knobs(config);
  Descriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, h).set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, config);
  const Support s = plan.try_finalize("execution plan of " + info.text());
  if (!s.ok) return s;
  int64_t ws = 0, got = 0;
  CONVOY_CUDNN_CHECK(
      cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got, &ws));
  if (ws > max_workspace)
    return Support::refused(info.text() + ": needs " + std::to_string(ws) + " bytes of workspace, over the limit of " +
                            std::to_string(max_workspace));
  plan_ = Descriptor();  // the old plan goes before the configuration it was made from
  engine_desc_ = std::move(engine);
  config_ = std::move(config);
  plan_ = std::move(plan);
  workspace_ = ws;
  engine_ = info;
  origin_ = std::move(origin);
  return {};
}

Support Plan::build(cudnnHandle_t h, const Descriptor& op_graph, int64_t max_workspace) {
  // The fallback list can be long: the first refusals are listed, the rest counted.
  constexpr int kListed = 16;
  std::string why;
  int refusals = 0;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_INSTANT, CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    std::vector<Descriptor> configs = ranked_configs(op_graph, mode, why);
    for (size_t i = 0; i < configs.size(); ++i) {
      const std::string origin = std::string("heuristics ") + mode_name(mode) + " #" + std::to_string(i);
      const Support s = build_config(h, std::move(configs[i]), Descriptor(), origin, max_workspace);
      if (s.ok) return s;
      if (++refusals <= kListed) why += "\n  " + std::string(mode_name(mode)) + ": " + s.why;
    }
  }
  if (refusals > kListed) why += "\n  and " + std::to_string(refusals - kListed) + " more engine configurations";
  return Support::refused("no engine configuration of any heuristic mode was accepted:" + why);
}

void Plan::keep(std::shared_ptr<const std::vector<Descriptor>> parts) { kept_ = std::move(parts); }

void Plan::execute(cudnnHandle_t h, cudaStream_t stream, const std::vector<int64_t>& uids,
                   const std::vector<void*>& pointers, void* workspace) const {
  if (!built()) fail("cuDNN graph: a plan that was not built was run");
  if (uids.size() != pointers.size()) fail("cuDNN graph: as many pointers as unique ids are needed");
  cudaStream_t bound = nullptr;
  CONVOY_CUDNN_CHECK(cudnnGetStream(h, &bound));
  if (bound != stream) CONVOY_CUDNN_CHECK(cudnnSetStream(h, stream));
  Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set_pointers(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, pointers)
      .set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, uids)
      .set_pointers(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, {workspace})
      .finalize();
  CONVOY_CUDNN_CHECK(cudnnBackendExecute(h, plan_.get(), pack.get()));
}

namespace {

// One search's state: what was found, what was seen, and when it must stop.
class Searcher {
 public:
  Searcher(cudnnHandle_t h, int64_t max_workspace, const SearchLimits& limits)
      : h_(h), max_workspace_(max_workspace), limits_(limits), start_(std::chrono::steady_clock::now()) {}

  // Builds the plan of one finalized configuration unless it was seen or a limit was reached.
  // A configuration whose engine cannot even be read is a refusal too: the search goes on.
  void consider(Descriptor&& config, Descriptor&& engine, const std::string& origin) {
    try {
      EngineInfo info;
      read_engine(config, info);
      info.knobs = read_knobs(config);
      if (!seen_.insert(std::to_string(info.global_index) + " " + info.knobs).second) return;
      const bool compiles = info.runtime_compiled && limits_.max_runtime_compiled >= 0;
      if (full() || (compiles && compiled_ >= limits_.max_runtime_compiled)) {
        ++found_.not_tried;
        return;
      }
      if (compiles) ++compiled_;
      Plan p;
      const Support s = p.build_config(h_, std::move(config), std::move(engine), origin, max_workspace_);
      if (s.ok)
        found_.plans.push_back(std::move(p));
      else
        found_.refusals.push_back(origin + ": " + s.why);
    } catch (const Error& e) {
      found_.refusals.push_back(origin + ": " + e.what());
    }
  }
  void refused(const std::string& line) { found_.refusals.push_back(line); }
  void skipped(size_t configurations) { found_.not_tried += int(configurations); }
  PlanSearch take() { return std::move(found_); }

 private:
  bool full() const {
    const std::chrono::duration<double> spent = std::chrono::steady_clock::now() - start_;
    return int(found_.plans.size()) >= limits_.max_plans || spent.count() > limits_.max_seconds;
  }
  cudnnHandle_t h_;
  int64_t max_workspace_;
  SearchLimits limits_;
  std::chrono::steady_clock::time_point start_;
  std::set<std::string> seen_;
  int compiled_ = 0;  // runtime-compiled plans attempted
  PlanSearch found_;
};

// Engine `index` of the graph with its default knobs, as a finalized configuration, or the refusal.
Support engine_config(const Descriptor& op_graph, int64_t index, Descriptor& engine, Descriptor& config) {
  const std::string what = "global engine " + std::to_string(index);
  engine = Descriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  engine.set(CUDNN_ATTR_ENGINE_OPERATION_GRAPH, op_graph).set(CUDNN_ATTR_ENGINE_GLOBAL_INDEX, index);
  Support s = engine.try_finalize(what);
  if (!s.ok) return s;
  config = Descriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  config.set(CUDNN_ATTR_ENGINECFG_ENGINE, engine);
  return config.try_finalize(what + ", configuration with default knobs");
}

// Each engine by global index with its default knobs; returns how many the graph admits.
int64_t consider_engines(Searcher& search, const Descriptor& op_graph) {
  int64_t count = 0, got = 0;
  CONVOY_CUDNN_CHECK(cudnnBackendGetAttribute(op_graph.get(), CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT,
                                              CUDNN_TYPE_INT64, 1, &got, &count));
  for (int64_t i = 0; i < count; ++i) {
    Descriptor engine, config;
    Support s;
    try {
      s = engine_config(op_graph, i, engine, config);
    } catch (const Error& e) {
      s = Support::refused("global engine " + std::to_string(i) + ": " + e.what());
    }
    if (s.ok)
      search.consider(std::move(config), std::move(engine), "global engine " + std::to_string(i));
    else
      search.refused(s.why);
  }
  return count;
}

// The ranked configurations of each heuristics mode, the first per_mode of each (all if negative).
void consider_heuristics(Searcher& search, const Descriptor& op_graph, int per_mode) {
  for (cudnnBackendHeurMode_t mode :
       {CUDNN_HEUR_MODE_INSTANT, CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_B, CUDNN_HEUR_MODE_FALLBACK}) {
    std::string why;
    std::vector<Descriptor> configs = ranked_configs(op_graph, mode, why);
    if (!why.empty()) search.refused(why.substr(3));  // ranked_configs starts each reason with "\n  "
    const size_t n = per_mode < 0 ? configs.size() : std::min(configs.size(), size_t(per_mode));
    for (size_t i = 0; i < n; ++i)
      search.consider(std::move(configs[i]), Descriptor(),
                      std::string("heuristics ") + mode_name(mode) + " #" + std::to_string(i));
    search.skipped(configs.size() - n);
  }
}

}  // namespace

PlanSearch search_plans(cudnnHandle_t h, const Descriptor& op_graph, int64_t max_workspace,
                        const SearchLimits& limits) {
  Searcher search(h, max_workspace, limits);
  // By default each engine once first (so the limits cannot spend the search on one engine's knobs),
  // then the knob choices heuristics rank.
  if (limits.heuristics_first) consider_heuristics(search, op_graph, limits.per_mode);
  const int64_t count = consider_engines(search, op_graph);
  if (!limits.heuristics_first) consider_heuristics(search, op_graph, limits.per_mode);
  PlanSearch found = search.take();
  found.global_count = count;
  return found;
}

PlanSearch search_kept(cudnnHandle_t h, const std::shared_ptr<const std::vector<Descriptor>>& parts,
                       const Support& refused, int64_t max_workspace, const SearchLimits& limits) {
  PlanSearch found;
  if (!parts) {
    found.refusals.push_back(refused.why);
    return found;
  }
  found = search_plans(h, parts->back(), max_workspace, limits);
  for (Plan& p : found.plans) p.keep(parts);
  return found;
}

}  // namespace convoy::gpu::graph
