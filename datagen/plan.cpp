// Permutation and file assignment.
#include "datagen/plan.h"

#include <algorithm>
#include <numeric>

#include "shared/counter_rng.h"

namespace convoy::datagen {
namespace {

// Uniform in [0, bound) without modulo bias (Lemire's multiply-and-reject).
uint64_t below(uint64_t& state, uint64_t bound) {
  unsigned __int128 m = (unsigned __int128)splitmix64(state) * bound;
  uint64_t low = uint64_t(m);
  if (low < bound) {
    const uint64_t threshold = -bound % bound;
    while (low < threshold) {
      m = (unsigned __int128)splitmix64(state) * bound;
      low = uint64_t(m);
    }
  }
  return uint64_t(m >> 64);
}

}  // namespace

std::vector<uint64_t> permutation(uint64_t n, uint64_t seed) {
  std::vector<uint64_t> p(n);
  std::iota(p.begin(), p.end(), uint64_t{0});
  uint64_t state = seed;
  for (uint64_t i = n; i > 1; --i) std::swap(p[i - 1], p[below(state, i)]);
  return p;
}

Plan make_plan(uint64_t num_samples, uint32_t per_file, uint64_t seed) {
  Plan plan;
  plan.per_file = per_file;
  plan.order = permutation(num_samples, seed);
  return plan;
}

double rank_balance(uint64_t samples, uint32_t per_file, int ranks) {
  if (samples == 0 || ranks < 1) return 1.0;
  const uint64_t files = (samples + per_file - 1) / per_file, rounds = (files + uint64_t(ranks) - 1) / uint64_t(ranks);
  const uint64_t busiest = std::min<uint64_t>(samples, rounds * per_file);
  return double(samples) / (double(ranks) * double(busiest));
}

uint32_t even_per_file(uint64_t samples, uint32_t per_file, int ranks) {
  const uint64_t files = (samples + per_file - 1) / per_file;
  const uint64_t rounds = std::max<uint64_t>(1, (files + uint64_t(ranks) - 1) / uint64_t(ranks));
  const uint64_t per_rank_round = uint64_t(ranks) * rounds;
  return uint32_t(std::max<uint64_t>(1, (samples + per_rank_round - 1) / per_rank_round));
}

RankShare rank_share(const Plan& plan, int rank, int ranks) {
  RankShare share;
  share.files_per_rank.assign(size_t(ranks), 0);
  for (uint64_t b = 0; b < plan.num_files(); ++b) {
    ++share.files_per_rank[size_t(plan.owner(b, ranks))];
    if (plan.owner(b, ranks) != rank) continue;
    share.files.push_back(b);
    share.samples.insert(share.samples.end(), plan.order.begin() + long(plan.file_begin(b)),
                         plan.order.begin() + long(plan.file_end(b)));
  }
  return share;
}

}  // namespace convoy::datagen
