// The fused convolution + batch-norm graphs of fused_conv_bn.h, as NVIDIA's MLPerf ResNet and
// cudnn-frontend's conv-genstats, scale-bias-ReLU-conv-genstats and BN-finalize samples build them,
// and scale-bias-ReLU-conv alone (the generic runtime fusion engine's mainloop fusion).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dev/cuda/fused_conv_bn.h"
#include "shared/error.h"

namespace convoy::gpu {
namespace {

using graph::Descriptor;
using graph::Support;

// Unique ids of the graphs' tensors; the virtual ones (the prologue's fp32 intermediates) need ids
// too, though they never appear in a variant pack.
enum Uid : int64_t { kX = 1, kW, kY, kSum, kSqsum, kScale, kBias, kScaled, kBiased, kActivated };
enum FinalizeUid : int64_t {
  kFinSum = 100,
  kFinSqsum,
  kGamma,
  kBeta,
  kMeanIn,
  kVarIn,
  kMeanOut,
  kVarOut,
  kSavedMean,
  kSavedInvstd,
  kEqScale,
  kEqBias,
  kEps,
  kMomentum,
  kCount,
};

// Moves descriptors into `keep`: cuDNN's finalized descriptors refer to the ones they were given,
// so a graph's tensors and operations live as long as its plan.
template <typename... D>
void keep(std::vector<Descriptor>& keep, D&&... d) {
  (keep.push_back(std::move(d)), ...);
}

// Runs a graph's construction; a descriptor cuDNN refuses to finalize (a data type or layout it
// has no support for) is a refusal of the pattern, reported with cuDNN's reason.
template <typename F>
Support refusing(const char* what, F&& build) {
  try {
    return build();
  } catch (const Error& e) {
    return Support::refused(std::string(what) + ": " + e.what());
  }
}

}  // namespace

const char* pattern_name(FusedPattern p) {
  switch (p) {
    case FusedPattern::conv_genstats: return "ConvGenstats";
    case FusedPattern::scale_bias_relu_conv_genstats: return "ScaleBiasReluConvGenstats";
    default: return "ScaleBiasReluConv";
  }
}

bool has_prologue(FusedPattern p) { return p != FusedPattern::conv_genstats; }
bool has_statistics(FusedPattern p) { return p != FusedPattern::scale_bias_relu_conv; }

const char* type_name(cudnnDataType_t t) {
  switch (t) {
    case CUDNN_DATA_FLOAT: return "fp32";
    case CUDNN_DATA_BFLOAT16: return "bf16";
    case CUDNN_DATA_HALF: return "fp16";
    default: return "?";
  }
}

std::string FusedConvTypes::text() const {
  return std::string("io ") + type_name(io) + ", scale/bias " + type_name(scale_bias) + ", stats " +
         type_name(stats_prec);
}

FusedConvPlan::FusedConvPlan(cudnnHandle_t h, FusedPattern pattern, const FusedConvShape& shape, int64_t max_workspace,
                             const FusedConvTypes& types)
    : pattern_(pattern), shape_(shape), types_(types) {
  support_ = refusing(pattern_name(pattern), [&] { return build(h, max_workspace); });
}

Support FusedConvPlan::build(cudnnHandle_t h, int64_t max_workspace) {
  const FusedConvShape& s = shape_;
  const bool prologue = has_prologue(pattern_), stats = has_statistics(pattern_);
  Descriptor x = graph::nhwc_tensor(kX, types_.io, s.n, s.c, s.h, s.w);
  Descriptor w = graph::nhwc_tensor(kW, types_.io, s.k, s.c, s.r, s.s);
  Descriptor y = graph::nhwc_tensor(kY, types_.io, s.n, s.k, s.p(), s.q());
  Descriptor conv = graph::convolution(s.pad, s.stride);
  std::vector<const Descriptor*> ops;
  // relu(x * scale + bias) in fp32 virtual tensors, read by the convolution without reaching memory.
  Descriptor scale, bias, scaled, biased, activated, mul_fn, add_fn, relu_fn, mul, add, relu;
  if (prologue) {
    scale = graph::channel_vector(kScale, types_.scale_bias, s.c);
    bias = graph::channel_vector(kBias, types_.scale_bias, s.c);
    scaled = graph::nhwc_tensor(kScaled, CUDNN_DATA_FLOAT, s.n, s.c, s.h, s.w, true);
    biased = graph::nhwc_tensor(kBiased, CUDNN_DATA_FLOAT, s.n, s.c, s.h, s.w, true);
    activated = graph::nhwc_tensor(kActivated, CUDNN_DATA_FLOAT, s.n, s.c, s.h, s.w, true);
    mul_fn = graph::pointwise(CUDNN_POINTWISE_MUL), add_fn = graph::pointwise(CUDNN_POINTWISE_ADD);
    relu_fn = graph::pointwise(CUDNN_POINTWISE_RELU_FWD);
    mul = graph::pointwise_op(mul_fn, x, &scale, scaled);
    add = graph::pointwise_op(add_fn, scaled, &bias, biased);
    relu = graph::pointwise_op(relu_fn, biased, nullptr, activated);
    ops = {&mul, &add, &relu};
  }
  Descriptor conv_op = graph::conv_forward_op(prologue ? activated : x, w, y, conv);
  ops.push_back(&conv_op);
  Descriptor sum, sqsum, genstats;
  if (stats) {
    sum = graph::channel_vector(kSum, CUDNN_DATA_FLOAT, s.k);
    sqsum = graph::channel_vector(kSqsum, CUDNN_DATA_FLOAT, s.k);
    genstats = graph::genstats_op(y, sum, sqsum, types_.stats_prec);
    ops.push_back(&genstats);
  }
  Descriptor op_graph = graph::operation_graph(h, ops);
  const Support g = op_graph.try_finalize(std::string("operation graph of ") + pattern_name(pattern_));
  if (!g.ok) return g;
  std::vector<Descriptor> parts;  // the descriptors not made are empty, and harmless to keep
  keep(parts, std::move(scale), std::move(bias), std::move(scaled), std::move(biased), std::move(activated),
       std::move(mul_fn), std::move(add_fn), std::move(relu_fn), std::move(mul), std::move(add), std::move(relu),
       std::move(x), std::move(w), std::move(y), std::move(conv), std::move(conv_op), std::move(sum), std::move(sqsum),
       std::move(genstats), std::move(op_graph));
  parts_ = std::make_shared<const std::vector<Descriptor>>(std::move(parts));
  const Support p = plan_.build(h, parts_->back(), max_workspace);
  plan_.keep(parts_);
  return p;
}

graph::PlanSearch FusedConvPlan::search(cudnnHandle_t h, int64_t max_workspace,
                                        const graph::SearchLimits& limits) const {
  return graph::search_kept(h, parts_, support_, max_workspace, limits);
}

void FusedConvPlan::use(graph::Plan&& plan) {
  if (!plan.built()) fail("FusedConvPlan: a plan that was not built cannot be used");
  plan_ = std::move(plan);
  support_ = {};
}

void FusedConvPlan::run(cudnnHandle_t h, cudaStream_t stream, const FusedConvTensors& t, void* workspace) const {
  std::vector<int64_t> uids{kX, kW, kY};
  std::vector<void*> ptrs{const_cast<void*>(t.x), const_cast<void*>(t.w), t.y};
  if (has_statistics(pattern_)) {
    uids.insert(uids.end(), {kSum, kSqsum});
    ptrs.insert(ptrs.end(), {t.sum, t.sqsum});
  }
  if (has_prologue(pattern_)) {
    if (!t.scale || !t.bias) fail("FusedConvPlan: the scale-bias-ReLU prologue needs its scale and bias");
    uids.insert(uids.end(), {kScale, kBias});
    ptrs.insert(ptrs.end(), {const_cast<void*>(t.scale), const_cast<void*>(t.bias)});
  }
  plan_.execute(h, stream, uids, ptrs, workspace);
}

BnFinalizePlan::BnFinalizePlan(cudnnHandle_t h, int c, int64_t max_workspace, cudnnDataType_t eq_type)
    : c_(c), eq_type_(eq_type) {
  support_ = refusing("BnFinalize", [&] { return build(h, max_workspace); });
}

Support BnFinalizePlan::build(cudnnHandle_t h, int64_t max_workspace) {
  std::vector<Descriptor> t;  // indexed by uid - kFinSum
  for (int64_t uid = kFinSum; uid <= kSavedInvstd; ++uid) t.push_back(graph::channel_vector(uid, CUDNN_DATA_FLOAT, c_));
  t.push_back(graph::channel_vector(kEqScale, eq_type_, c_));
  t.push_back(graph::channel_vector(kEqBias, eq_type_, c_));
  t.push_back(graph::scalar_by_value(kEps, CUDNN_DATA_DOUBLE));
  t.push_back(graph::scalar_by_value(kMomentum, CUDNN_DATA_DOUBLE));
  t.push_back(graph::scalar_by_value(kCount, CUDNN_DATA_INT64));
  auto at = [&](int64_t uid) -> const Descriptor& { return t[size_t(uid - kFinSum)]; };
  Descriptor op(CUDNN_BACKEND_OPERATION_BN_FINALIZE_STATISTICS_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_BN_FINALIZE_STATS_MODE, CUDNN_BN_FINALIZE_STATISTICS_TRAINING)
      .set(CUDNN_ATTR_OPERATION_BN_FINALIZE_MATH_PREC, CUDNN_DATA_FLOAT)
      .set(CUDNN_ATTR_OPERATION_BN_FINALIZE_Y_SUM_DESC, at(kFinSum))
      .set(CUDNN_ATTR_OPERATION_BN_FINALIZE_Y_SQ_SUM_DESC, at(kFinSqsum))
      .set(CUDNN_ATTR_OPERATION_BN_FINALIZE_SCALE_DESC, at(kGamma))
      .set(CUDNN_ATTR_OPERATION_BN_FINALIZE_BIAS_DESC, at(kBeta))
      .set(CUDNN_ATTR_OPERATION_BN_FINALIZE_PREV_RUNNING_MEAN_DESC, at(kMeanIn))
      .set(CUDNN_ATTR_OPERATION_BN_FINALIZE_PREV_RUNNING_VAR_DESC, at(kVarIn))
      .set(CUDNN_ATTR_OPERATION_BN_FINALIZE_UPDATED_RUNNING_MEAN_DESC, at(kMeanOut))
      .set(CUDNN_ATTR_OPERATION_BN_FINALIZE_UPDATED_RUNNING_VAR_DESC, at(kVarOut))
      .set(CUDNN_ATTR_OPERATION_BN_FINALIZE_SAVED_MEAN_DESC, at(kSavedMean))
      .set(CUDNN_ATTR_OPERATION_BN_FINALIZE_SAVED_INV_STD_DESC, at(kSavedInvstd))
      .set(CUDNN_ATTR_OPERATION_BN_FINALIZE_EQ_SCALE_DESC, at(kEqScale))
      .set(CUDNN_ATTR_OPERATION_BN_FINALIZE_EQ_BIAS_DESC, at(kEqBias))
      .set(CUDNN_ATTR_OPERATION_BN_FINALIZE_EPSILON_DESC, at(kEps))
      .set(CUDNN_ATTR_OPERATION_BN_FINALIZE_EXP_AVERATE_FACTOR_DESC, at(kMomentum))
      .set(CUDNN_ATTR_OPERATION_BN_FINALIZE_ACCUM_COUNT_DESC, at(kCount));
  const Support o = op.try_finalize("BN finalize operation");
  if (!o.ok) return o;
  Descriptor op_graph = graph::operation_graph(h, {&op});
  const Support g = op_graph.try_finalize("operation graph of BnFinalize");
  if (!g.ok) return g;
  keep(t, std::move(op), std::move(op_graph));
  auto parts = std::make_shared<const std::vector<Descriptor>>(std::move(t));
  const Support p = plan_.build(h, parts->back(), max_workspace);
  plan_.keep(std::move(parts));
  return p;
}

void BnFinalizePlan::run(cudnnHandle_t h, cudaStream_t stream, const BnFinalizeTensors& t, int64_t count, double eps,
                         double momentum, void* workspace) const {
  auto in = [](const float* p) { return static_cast<void*>(const_cast<float*>(p)); };
  // The by-value scalars are read from host memory when the plan is queued.
  const std::vector<int64_t> uids{kFinSum,    kFinSqsum,    kGamma,   kBeta,   kMeanIn, kVarIn,    kMeanOut, kVarOut,
                                  kSavedMean, kSavedInvstd, kEqScale, kEqBias, kEps,    kMomentum, kCount};
  const std::vector<void*> ptrs{in(t.sum),
                                in(t.sqsum),
                                in(t.gamma),
                                in(t.beta),
                                in(t.running_mean_in),
                                in(t.running_var_in),
                                t.running_mean_out,
                                t.running_var_out,
                                t.saved_mean,
                                t.saved_invstd,
                                t.eq_scale,
                                t.eq_bias,
                                &eps,
                                &momentum,
                                &count};
  plan_.execute(h, stream, uids, ptrs, workspace);
}

}  // namespace convoy::gpu
