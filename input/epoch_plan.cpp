// Epoch plans with a portable Fisher-Yates shuffle driven by the counter hash, so the order is
// the same on every platform and standard library.
#include "input/epoch_plan.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "shared/counter_rng.h"
#include "shared/error.h"

namespace convoy {
namespace {

template <class T>
void shuffle(std::vector<T>& v, uint64_t key, uint64_t salt) {
  for (size_t i = v.size(); i > 1; --i) {
    size_t j = size_t(double(counter_uniform(key, salt, i)) * double(i));
    if (j >= i) j = i - 1;
    std::swap(v[i - 1], v[j]);
  }
}
uint64_t epoch_key(const PlanOptions& o) { return order_epoch_key(o.seed, o.epoch); }

// Samples [lo, hi) of one file.
struct Piece {
  uint32_t file = 0, lo = 0, hi = 0;
};

long long total_samples(const DatasetMeta& meta) {
  long long n = 0;
  for (const BatchFileEntry& f : meta.files) n += f.count;
  return n;
}

// Training: the permuted files as one sequence of samples, cut to the rank's contiguous range.
std::vector<Piece> share_pieces(const DatasetMeta& meta, const PlanOptions& o) {
  std::vector<uint32_t> files(meta.files.size());
  std::iota(files.begin(), files.end(), 0u);
  shuffle(files, epoch_key(o), 0xF11E5);
  const long long share = steps_per_epoch(meta, o.ranks, o.local_batch) * std::max(1, o.local_batch);
  const long long lo = share * o.rank, hi = lo + share;
  std::vector<Piece> out;
  long long at = 0;  // where the file starts in the sequence
  for (uint32_t f : files) {
    const long long end = at + meta.files[f].count;
    if (end > lo && at < hi) out.push_back({f, uint32_t(std::max(lo, at) - at), uint32_t(std::min(hi, end) - at)});
    at = end;
    if (at >= hi) break;
  }
  return out;
}

// Evaluation: whole files dealt by stride, in file order.
std::vector<Piece> dealt_files(const DatasetMeta& meta, const PlanOptions& o) {
  std::vector<Piece> out;
  for (size_t f = size_t(o.rank); f < meta.files.size(); f += size_t(o.ranks))
    out.push_back({uint32_t(f), 0, meta.files[f].count});
  return out;
}

// The pieces' samples, in training shuffled in windows of `window_files` pieces.
std::vector<SampleRef> in_windows(const std::vector<Piece>& pieces, const PlanOptions& o) {
  const size_t w = size_t(std::max(1, o.window_files));
  std::vector<SampleRef> out;
  for (size_t start = 0; start < pieces.size(); start += w) {
    std::vector<SampleRef> window;
    for (size_t p = start; p < std::min(pieces.size(), start + w); ++p)
      for (uint32_t i = pieces[p].lo; i < pieces[p].hi; ++i) window.push_back({pieces[p].file, i});
    // Keyed by where the window starts in the files, not by its position in the rank's share, so
    // that whole files shuffle the same way whichever rank reads them.
    const Piece& first = pieces[start];
    if (o.shuffle) shuffle(window, epoch_key(o), 0x5A3B1E00000000ull + first.file + (uint64_t(first.lo) << 32));
    out.insert(out.end(), window.begin(), window.end());
  }
  return out;
}

// The epoch of a run resumed on other ranks: global batch b holds the plan's ranks' batches b, in
// their rank order, and this rank takes its slice of it.
std::vector<SampleRef> resumed_stream(const DatasetMeta& meta, const PlanOptions& o) {
  const long long L = std::max(1, o.local_batch), global = L * o.ranks;
  if (o.plan_ranks < 1 || global % o.plan_ranks != 0)
    fail("epoch plan: a global batch of " + std::to_string(global) + " does not split over the plan's " +
         std::to_string(o.plan_ranks) + " ranks (internal error)");
  const long long Lq = global / o.plan_ranks, steps = steps_per_epoch(meta, o.ranks, int(L));
  std::vector<std::vector<SampleRef>> plan;
  for (int q = 0; q < o.plan_ranks; ++q) {
    PlanOptions p = o;
    p.rank = q, p.ranks = o.plan_ranks, p.local_batch = int(Lq), p.plan_ranks = 0;
    plan.push_back(rank_stream(meta, p));
  }
  std::vector<SampleRef> out;
  out.reserve(size_t(steps * L));
  for (long long b = 0; b < steps; ++b)
    for (long long j = o.rank * L; j < (o.rank + 1) * L; ++j)
      out.push_back(plan[size_t(j / Lq)][size_t(b * Lq + j % Lq)]);
  return out;
}

// Global order: one rank's local plan at the local batch G (the same sequence whatever the ranks),
// of whose every global batch this rank takes slice `rank`.
std::vector<SampleRef> global_stream(const DatasetMeta& meta, const PlanOptions& o) {
  const long long L = std::max(1, o.local_batch), G = L * std::max(1, o.ranks);
  PlanOptions one = o;
  one.rank = 0, one.ranks = 1, one.local_batch = int(G), one.plan_ranks = 0, one.order = SampleOrder::local;
  const std::vector<SampleRef> all = in_windows(share_pieces(meta, one), one);
  const long long steps = (long long)all.size() / G;
  std::vector<SampleRef> out;
  out.reserve(size_t(steps * L));
  for (long long b = 0; b < steps; ++b) {
    const auto from = all.begin() + (b * G + o.rank * L);
    out.insert(out.end(), from, from + L);
  }
  return out;
}

}  // namespace

const char* order_name(SampleOrder o) { return o == SampleOrder::global ? "global" : "local"; }

std::optional<SampleOrder> parse_order(const std::string& name) {
  if (name == "local") return SampleOrder::local;
  if (name == "global") return SampleOrder::global;
  return std::nullopt;
}

long long steps_per_epoch(const DatasetMeta& meta, int ranks, int local_batch) {
  return total_samples(meta) / (std::max(1LL, (long long)ranks) * std::max(1, local_batch));
}

std::vector<SampleRef> rank_stream(const DatasetMeta& meta, const PlanOptions& o) {
  if (!o.shuffle) return in_windows(dealt_files(meta, o), o);
  if (o.order == SampleOrder::global) return global_stream(meta, o);
  if (o.plan_ranks > 0 && o.plan_ranks != o.ranks) return resumed_stream(meta, o);
  return in_windows(share_pieces(meta, o), o);
}

std::vector<uint32_t> rank_files(const DatasetMeta& meta, const PlanOptions& o) {
  std::vector<uint32_t> files;
  std::vector<bool> seen(meta.files.size());
  for (const SampleRef& r : rank_stream(meta, o))
    if (!seen[r.file]) seen[r.file] = true, files.push_back(r.file);
  return files;
}

}  // namespace convoy
