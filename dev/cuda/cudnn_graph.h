// cuDNN's graph API (the backend descriptors) made RAII: a descriptor with typed attribute setters,
// builders for the pieces of fused convolution + batch-norm graphs, a plan picked by heuristics, and a
// search over every engine configuration a graph admits (to time them and keep the fastest).
#pragma once
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace convoy::gpu::graph {

// The attribute type cuDNN is told for each C++ value type a setter is given. (Descriptors and
// pointers, both void* to C++, have setters of their own.)
template <typename T>
struct AttrType;
#define CONVOY_GRAPH_ATTR_TYPE(T, V)                        \
  template <>                                               \
  struct AttrType<T> {                                      \
    static constexpr cudnnBackendAttributeType_t value = V; \
  }
CONVOY_GRAPH_ATTR_TYPE(int64_t, CUDNN_TYPE_INT64);
CONVOY_GRAPH_ATTR_TYPE(float, CUDNN_TYPE_FLOAT);
CONVOY_GRAPH_ATTR_TYPE(double, CUDNN_TYPE_DOUBLE);
CONVOY_GRAPH_ATTR_TYPE(bool, CUDNN_TYPE_BOOLEAN);
CONVOY_GRAPH_ATTR_TYPE(cudnnHandle_t, CUDNN_TYPE_HANDLE);
CONVOY_GRAPH_ATTR_TYPE(cudnnDataType_t, CUDNN_TYPE_DATA_TYPE);
CONVOY_GRAPH_ATTR_TYPE(cudnnConvolutionMode_t, CUDNN_TYPE_CONVOLUTION_MODE);
CONVOY_GRAPH_ATTR_TYPE(cudnnPointwiseMode_t, CUDNN_TYPE_POINTWISE_MODE);
CONVOY_GRAPH_ATTR_TYPE(cudnnBackendHeurMode_t, CUDNN_TYPE_HEUR_MODE);
CONVOY_GRAPH_ATTR_TYPE(cudnnGenStatsMode_t, CUDNN_TYPE_GENSTATS_MODE);
CONVOY_GRAPH_ATTR_TYPE(cudnnBnFinalizeStatsMode_t, CUDNN_TYPE_BN_FINALIZE_STATS_MODE);
#undef CONVOY_GRAPH_ATTR_TYPE

// Whether cuDNN accepted a graph or plan; if not, why: the step, cuDNN's status and its last error
// message. A refusal is an answer ("no engine for this shape"), not an error.
struct Support {
  bool ok = true;
  std::string why;
  static Support refused(std::string reason) { return {false, std::move(reason)}; }
};

// "what: CUDNN_STATUS_... (cuDNN's last error message, where it gives one)".
std::string refusal_text(const std::string& what, cudnnStatus_t rc);

// One backend descriptor, destroyed with its owner. Setting an attribute cannot be refused for want
// of support (only finalizing can), so a failed set is a bug and throws through the check.
class Descriptor {
 public:
  Descriptor() = default;
  explicit Descriptor(cudnnBackendDescriptorType_t type);
  ~Descriptor();
  Descriptor(Descriptor&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
  Descriptor& operator=(Descriptor&& o) noexcept;
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }

  template <typename T>
  Descriptor& set(cudnnBackendAttributeName_t a, T v) {
    return set_raw(a, AttrType<T>::value, 1, &v);
  }
  template <typename T>
  Descriptor& set(cudnnBackendAttributeName_t a, const std::vector<T>& v) {
    return set_raw(a, AttrType<T>::value, int64_t(v.size()), v.data());
  }
  Descriptor& set(cudnnBackendAttributeName_t a, const Descriptor& d);
  Descriptor& set(cudnnBackendAttributeName_t a, const std::vector<const Descriptor*>& ds);
  Descriptor& set_pointers(cudnnBackendAttributeName_t a, const std::vector<void*>& p);

  // Throws on failure: for descriptors that are complete by construction (tensors, convolutions).
  Descriptor& finalize();
  // A refusal comes back as the reason, `what` naming the step.
  Support try_finalize(const std::string& what);

 private:
  Descriptor& set_raw(cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t count, const void* v);
  cudnnBackendDescriptor_t d_ = nullptr;
};

// Tensor builders. Dimensions are always (n, c, h, w); NHWC means strides (h*w*c, 1, w*c, c).
// Virtual tensors are intermediate results that never reach memory (uid still unique).
Descriptor nhwc_tensor(int64_t uid, cudnnDataType_t type, int64_t n, int64_t c, int64_t h, int64_t w,
                       bool is_virtual = false);
// A per-channel vector [1, c, 1, 1] (scale, bias, statistics).
Descriptor channel_vector(int64_t uid, cudnnDataType_t type, int64_t c);
// A [1, 1, 1, 1] scalar passed by value in the variant pack (a host pointer), e.g. epsilon.
Descriptor scalar_by_value(int64_t uid, cudnnDataType_t type);

// A 2-D cross-correlation with fp32 compute, the same padding on all sides, no dilation.
Descriptor convolution(int64_t pad, int64_t stride);
// y = conv(x, w) (alpha 1, beta 0).
Descriptor conv_forward_op(const Descriptor& x, const Descriptor& w, const Descriptor& y, const Descriptor& conv);
// The gradients of y = conv(x, w) from dy (alpha 1, beta 0: overwritten): dx, and dw.
Descriptor conv_backward_data_op(const Descriptor& dy, const Descriptor& w, const Descriptor& dx,
                                 const Descriptor& conv);
Descriptor conv_backward_filter_op(const Descriptor& x, const Descriptor& dy, const Descriptor& dw,
                                   const Descriptor& conv);
// A pointwise function (multiply, add, ReLU...) computed in fp32, and its operation y = f(x) or f(x, b).
// ReLU's clips are set as cudnn-frontend sets them (lower 0, slope 0, upper the largest float), not
// left to the backend's defaults (an upper clip of the largest double).
Descriptor pointwise(cudnnPointwiseMode_t mode);
Descriptor pointwise_op(const Descriptor& pointwise, const Descriptor& x, const Descriptor* b, const Descriptor& y);
// Per-channel sum and sum of squares of x over n, h, w, into fp32 sums. math_prec: cuDNN's legacy
// samples say fp32; cudnn-frontend's genstats node passes the type of x.
Descriptor genstats_op(const Descriptor& x, const Descriptor& sum, const Descriptor& sqsum,
                       cudnnDataType_t math_prec = CUDNN_DATA_FLOAT);

// The operations of one fused graph, returned unfinalized: its try_finalize is the first point where
// cuDNN may refuse the pattern.
Descriptor operation_graph(cudnnHandle_t h, const std::vector<const Descriptor*>& ops);

// What a plan runs: the engine's global index, its knob choices, and cuDNN's notes on it.
struct EngineInfo {
  int64_t global_index = -1;
  std::string knobs;  // "type=value ..." (cudnnBackendKnobType_t numbers)
  bool deterministic = true;
  bool runtime_compiled = false;  // its kernel is compiled when the plan is built (slow to build)
  std::string text() const;
};

// An execution plan of one engine configuration: by default the first that heuristics rank (instant
// mode, then mode A, then the fallback list) that cuDNN finalizes within the workspace limit; or any
// one search_plans found.
class Plan {
 public:
  Plan() = default;
  Plan(Plan&&) noexcept = default;
  Plan& operator=(Plan&& o) noexcept;  // releases the old plan before the descriptors it refers to
  // Support::ok false: no configuration was accepted; why lists each mode's and engine's refusal.
  Support build(cudnnHandle_t h, const Descriptor& op_graph, int64_t max_workspace);
  // The plan of one finalized engine configuration; `engine` is the engine descriptor the
  // configuration was made from where the caller made it (kept as long as the plan), `origin` says
  // where the configuration came from ("heuristics A #2", "global engine 5").
  Support build_config(cudnnHandle_t h, Descriptor&& config, Descriptor&& engine, std::string origin,
                       int64_t max_workspace);
  bool built() const { return plan_.get() != nullptr; }
  int64_t workspace_bytes() const { return workspace_; }
  const EngineInfo& engine() const { return engine_; }
  const std::string& origin() const { return origin_; }
  // Runs the plan on `stream` (the handle is bound to it first, if not already): uids[i] is read from
  // or written to pointers[i]; workspace holds at least workspace_bytes().
  void execute(cudnnHandle_t h, cudaStream_t stream, const std::vector<int64_t>& uids,
               const std::vector<void*>& pointers, void* workspace) const;
  // Holds the graph's descriptors (tensors, operations, the graph) for as long as the plan lives:
  // cuDNN's finalized descriptors refer to those they were built from. Plans of one graph share them.
  void keep(std::shared_ptr<const std::vector<Descriptor>> parts);

 private:
  std::shared_ptr<const std::vector<Descriptor>> kept_;  // destroyed after what refers to them
  Descriptor engine_desc_;
  Descriptor config_;
  Descriptor plan_;
  int64_t workspace_ = 0;
  EngineInfo engine_;
  std::string origin_;
};

// Bounds on search_plans: runtime-compiled engines compile their kernel while their plan is built
// (about a second each), so the search stops at max_plans built plans or after max_seconds.
struct SearchLimits {
  int max_plans = 16;
  double max_seconds = 5;
  int per_mode = -1;  // heuristics' configurations considered per mode, best first (-1: all)
  // The heuristics' lists before the engines by index, so that a tight limit still reaches their best.
  bool heuristics_first = false;
  int max_runtime_compiled = -1;  // runtime-compiled plans built at most (-1: no bound)
};

// What search_plans found: every plan built, and one line per configuration that was not.
struct PlanSearch {
  std::vector<Plan> plans;            // in the order found: engines by index first, then heuristics' lists
  std::vector<std::string> refusals;  // "origin: engine ...: reason"
  int not_tried = 0;                  // configurations left when a limit was reached or past per_mode
  int64_t global_count = 0;           // engines the graph admits by global index
};

// Every engine configuration cuDNN offers for a finalized graph: each engine by global index (0 .. the
// graph's CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT - 1) with its default knobs, then the ranked
// lists of heuristics modes instant, A, B and fallback (the other way round with heuristics_first);
// a configuration already seen (same engine, same knobs) is tried once. The plans do not hold the graph's descriptors:
// the caller keeps them (Plan::keep) for as long as a plan lives.
PlanSearch search_plans(cudnnHandle_t h, const Descriptor& op_graph, int64_t max_workspace, const SearchLimits& limits);
// search_plans over a graph whose descriptors `parts` hold (the finalized graph last), each plan
// keeping them; with no parts (the graph was refused), no plans and `refused` as the one refusal.
PlanSearch search_kept(cudnnHandle_t h, const std::shared_ptr<const std::vector<Descriptor>>& parts,
                       const Support& refused, int64_t max_workspace, const SearchLimits& limits);

}  // namespace convoy::gpu::graph
