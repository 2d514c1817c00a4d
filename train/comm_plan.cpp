// The comm plan record (comm_plan.h): the same bucket plan GradientSync cuts, and the ready shares
// from the nodes' costs; host-only, so that a CPU build writes what a CUDA run would send.
#include "train/comm_plan.h"

#include <algorithm>

namespace convoy {

CommPlan comm_plan(const Net& net, const BackendOptions& o, Backend backend) {
  CommPlan p;
  const std::vector<FlatRange> ranges = backward_ranges(net.nodes());
  if (backend == Backend::cpu) {
    if (!ranges.empty()) p.buckets.push_back({ranges.back().lo, ranges.front().hi});
    return p;
  }
  const GradComm g = grad_comm_for(o.grad_comm, o.precision);
  p.wire_elem_bytes = grad_comm_elem_bytes(g);
  p.grad_comm = name_of(grad_comm_names(), g);
  p.overlap = true;
  p.bucket_updates = o.bucket_updates;
  p.buckets = plan_buckets(ranges, sizeof(float), size_t(o.bucket_mb * double(1 << 20)));
  return p;
}

std::vector<double> bucket_ready_fractions(const std::vector<Node>& nodes, const std::vector<FlatRange>& buckets,
                                           const std::vector<double>& cost) {
  // Summed in the backward pass's order, as `done` is: the bucket the first node completes is at 1 exactly.
  double total = 0;
  for (size_t i = cost.size(); i-- > 0;) total += cost[i];
  std::vector<double> out;
  double done = 0;
  size_t next = 0;
  for (size_t i = nodes.size(); i-- > 0 && next < buckets.size();) {
    done += cost[i];
    const FlatRange r = param_range(nodes[i]);
    if (!r.empty() && r.lo == buckets[next].lo) out.push_back(total > 0 ? std::min(1.0, done / total) : 1.0), ++next;
  }
  return out;
}

std::vector<double> flops_cost(const std::vector<Node>& nodes) {
  std::vector<double> c;
  for (const Node& nd : nodes) c.push_back(nd.flops);
  return c;
}

std::vector<double> profiled_backward_cost(const std::vector<Node>& nodes) {
  std::vector<double> c;
  for (const Node& nd : nodes) c.push_back(nd.t_bwd);
  return c;
}

nlohmann::json comm_plan_record(const CommPlan& p, const Net& net, int ranks, int hosts, int local_batch) {
  nlohmann::json elements = nlohmann::json::array(), bytes = nlohmann::json::array();
  size_t params = 0;
  for (const FlatRange& b : p.buckets) {
    params += b.size();
    elements.push_back(b.size());
    bytes.push_back(double(b.size()) * p.wire_elem_bytes);
  }
  return {{"kind", "comm_plan"},
          {"ranks", ranks},
          {"hosts", hosts},
          {"local_batch", local_batch},
          {"params", params},
          {"grad_comm", p.grad_comm},
          {"overlap", p.overlap},
          {"bucket_updates", p.bucket_updates},
          {"bucket_elements", elements},
          {"bucket_bytes", bytes},
          {"bucket_ready_flops", bucket_ready_fractions(net.nodes(), p.buckets, flops_cost(net.nodes()))}};
}

}  // namespace convoy
