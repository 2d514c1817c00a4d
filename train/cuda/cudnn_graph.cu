// cuDNN's graph API made RAII (cudnn_graph.h): descriptors, the builders of fused graphs, and a plan
// picked by heuristics, with cuDNN's refusals kept as reasons rather than thrown.
#include <algorithm>
#include <array>
#include <string>

#include "train/cuda/cudnn_graph.h"
#include "train/gpu_context.h"

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
    default: return "B";
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

Descriptor& Descriptor::set(cudnnBackendAttributeName_t a, std::initializer_list<const Descriptor*> ds) {
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

Descriptor pointwise(cudnnPointwiseMode_t mode) {
  Descriptor pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  pw.set(CUDNN_ATTR_POINTWISE_MODE, mode).set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_DATA_FLOAT);
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

Descriptor genstats_op(const Descriptor& x, const Descriptor& sum, const Descriptor& sqsum) {
  Descriptor op(CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_GENSTATS_SUM_SQSUM)
      .set(CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_DATA_FLOAT)
      .set(CUDNN_ATTR_OPERATION_GENSTATS_XDESC, x)
      .set(CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, sum)
      .set(CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, sqsum);
  return std::move(op.finalize());
}

Descriptor operation_graph(cudnnHandle_t h, std::initializer_list<const Descriptor*> ops) {
  Descriptor g(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  g.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, ops).set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, h);
  return g;
}

std::string EngineInfo::text() const {
  return "engine " + std::to_string(global_index) + " (knobs " + (knobs.empty() ? "none" : knobs) + ", " +
         (deterministic ? "deterministic" : "nondeterministic") + ")";
}

Support Plan::try_config(cudnnHandle_t h, Descriptor& config, int64_t max_workspace) {
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
  config_ = std::move(config);
  plan_ = std::move(plan);
  workspace_ = ws;
  engine_ = info;
  return {};
}

Support Plan::build(cudnnHandle_t h, const Descriptor& op_graph, int64_t max_workspace) {
  // The fallback list can be long: the first refusals are listed, the rest counted.
  constexpr int kListed = 16;
  std::string why;
  int refusals = 0;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_INSTANT, CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    for (Descriptor& config : ranked_configs(op_graph, mode, why)) {
      const Support s = try_config(h, config, max_workspace);
      if (s.ok) return s;
      if (++refusals <= kListed) why += "\n  " + std::string(mode_name(mode)) + ": " + s.why;
    }
  }
  if (refusals > kListed) why += "\n  and " + std::to_string(refusals - kListed) + " more engine configurations";
  return Support::refused("no engine configuration of any heuristic mode was accepted:" + why);
}

void Plan::keep(std::vector<Descriptor>&& parts) {
  for (Descriptor& d : parts) kept_.push_back(std::move(d));
}

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

}  // namespace convoy::gpu::graph
