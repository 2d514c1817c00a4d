// The plain convolution graphs of conv_graph.h: one convolution operation per graph, forward,
// backward data or backward filter, as cudnn-frontend's conv_fprop, conv_dgrad and conv_wgrad nodes build them.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dev/cuda/conv_graph.h"
#include "shared/error.h"

namespace convoy::gpu {
namespace {

using graph::Descriptor;
using graph::Support;

enum Uid : int64_t { kX = 1, kW, kY };

}  // namespace

std::string ConvGraphShape::text() const {
  return std::to_string(n) + "x" + std::to_string(h) + "x" + std::to_string(w) + "x" + std::to_string(c) + " -> " +
         std::to_string(r) + "x" + std::to_string(s) + "/" + std::to_string(stride) + " pad " + std::to_string(pad) +
         " -> " + std::to_string(k) + " (out " + std::to_string(p()) + "x" + std::to_string(q()) + ")";
}

const char* pass_name(ConvPass p) {
  switch (p) {
    case ConvPass::forward: return "fwd";
    case ConvPass::backward_data: return "bwd-data";
    default: return "bwd-filter";
  }
}

ConvGraphPlan::ConvGraphPlan(cudnnHandle_t h, ConvPass pass, const ConvGraphShape& shape, const ConvGraphTypes& types)
    : pass_(pass), shape_(shape), types_(types) {
  // A descriptor cuDNN refuses to finalize (a data type it has no support for) refuses the graph.
  try {
    support_ = build(h);
  } catch (const Error& e) {
    support_ = Support::refused(std::string("convolution ") + pass_name(pass) + ": " + e.what());
  }
}

Support ConvGraphPlan::build(cudnnHandle_t h) {
  const ConvGraphShape& s = shape_;
  auto type_of = [&](ConvPass writer) { return pass_ == writer ? types_.out : types_.io; };
  Descriptor x = graph::nhwc_tensor(kX, type_of(ConvPass::backward_data), s.n, s.c, s.h, s.w);
  Descriptor w = graph::nhwc_tensor(kW, type_of(ConvPass::backward_filter), s.k, s.c, s.r, s.s);
  Descriptor y = graph::nhwc_tensor(kY, type_of(ConvPass::forward), s.n, s.k, s.p(), s.q());
  Descriptor conv = graph::convolution(s.pad, s.stride);
  Descriptor op = pass_ == ConvPass::forward         ? graph::conv_forward_op(x, w, y, conv)
                  : pass_ == ConvPass::backward_data ? graph::conv_backward_data_op(y, w, x, conv)
                                                     : graph::conv_backward_filter_op(x, y, w, conv);
  Descriptor op_graph = graph::operation_graph(h, {&op});
  const Support g = op_graph.try_finalize(std::string("operation graph of convolution ") + pass_name(pass_));
  if (!g.ok) return g;
  std::vector<Descriptor> parts;
  parts.push_back(std::move(x)), parts.push_back(std::move(w)), parts.push_back(std::move(y));
  parts.push_back(std::move(conv)), parts.push_back(std::move(op)), parts.push_back(std::move(op_graph));
  parts_ = std::make_shared<const std::vector<Descriptor>>(std::move(parts));
  return {};
}

Support ConvGraphPlan::pick(cudnnHandle_t h, int64_t max_workspace) {
  if (!parts_) return support_;
  graph::Plan p;
  const Support s = p.build(h, parts_->back(), max_workspace);
  if (!s.ok) return s;
  p.keep(parts_);
  plan_ = std::move(p);
  return s;
}

graph::PlanSearch ConvGraphPlan::search(cudnnHandle_t h, int64_t max_workspace,
                                        const graph::SearchLimits& limits) const {
  return graph::search_kept(h, parts_, support_, max_workspace, limits);
}

void ConvGraphPlan::use(graph::Plan&& plan) {
  if (!plan.built()) fail("ConvGraphPlan: a plan that was not built cannot be used");
  plan_ = std::move(plan);
}

void ConvGraphPlan::run(cudnnHandle_t h, cudaStream_t stream, const ConvGraphTensors& t, void* workspace) const {
  plan_.execute(h, stream, {kX, kW, kY}, {t.x, t.w, t.y}, workspace);
}

}  // namespace convoy::gpu
