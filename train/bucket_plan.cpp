// The bucket plan and the byte count of a step's all-reduces (see bucket_plan.h); host-only, so that
// both backends and the CPU tests share it.
#include "train/bucket_plan.h"

#include <algorithm>

namespace convoy {

FlatRange param_range(const Node& nd) {
  if (!nd.w_count && !nd.b_count) return {};
  const size_t lo = std::min(nd.w_count ? nd.w_off : nd.b_off, nd.b_count ? nd.b_off : nd.w_off);
  const size_t hi = std::max(nd.w_off + nd.w_count, nd.b_off + nd.b_count);
  return {lo, hi};
}

std::vector<FlatRange> backward_ranges(const std::vector<Node>& nodes) {
  std::vector<FlatRange> out;
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it)
    if (const FlatRange r = param_range(*it); !r.empty()) out.push_back(r);
  return out;
}

std::vector<FlatRange> plan_buckets(const std::vector<FlatRange>& ranges, size_t elem_bytes, size_t bucket_bytes) {
  const size_t most = std::max<size_t>(1, bucket_bytes / std::max<size_t>(1, elem_bytes));
  const size_t least = std::max<size_t>(1, most / 16);
  size_t left = 0;  // elements still to come after the range in hand
  for (const FlatRange& r : ranges) left += r.size();
  std::vector<FlatRange> buckets;
  FlatRange open;
  for (const FlatRange& r : ranges) {
    if (!open.empty() && (r.hi != open.lo || open.size() + r.size() > most)) buckets.push_back(open), open = {};
    open = open.empty() ? r : FlatRange{r.lo, open.hi};
    left -= r.size();
    if (open.size() >= std::clamp(left / 2, least, most)) buckets.push_back(open), open = {};
  }
  if (!open.empty()) buckets.push_back(open);
  return buckets;
}

double ring_allreduce_bytes(double bytes, int ranks) { return ranks > 1 ? 2.0 * (ranks - 1) / ranks * bytes : 0.0; }

double step_wire_bytes(const std::vector<FlatRange>& buckets, double elem_bytes, int ranks, size_t scale_bytes) {
  double bytes = ring_allreduce_bytes(sizeof(uint32_t), ranks);
  for (const FlatRange& b : buckets)
    bytes += ring_allreduce_bytes(double(b.size()) * elem_bytes, ranks) + ring_allreduce_bytes(scale_bytes, ranks);
  return bytes;
}

}  // namespace convoy
