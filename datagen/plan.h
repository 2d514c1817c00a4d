// The plan: one global permutation from the seed assigns every sample to (batch file, slot), and
// batch file b goes to rank b mod N. Depends only on the sample count, seed and file size, so
// every rank computes the same plan without talking to the others.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

namespace convoy::datagen {

// A permutation of [0, n) from a portable generator (splitmix64 + unbiased bounded draws), so the
// result is the same with any compiler and standard library.
std::vector<uint64_t> permutation(uint64_t n, uint64_t seed);

struct Plan {
  uint32_t per_file = 1024;
  std::vector<uint64_t> order;  // order[k]: the sample id in global slot k

  uint64_t num_files() const { return (order.size() + per_file - 1) / per_file; }
  uint64_t file_begin(uint64_t b) const { return b * per_file; }
  uint64_t file_end(uint64_t b) const { return std::min<uint64_t>(order.size(), (b + 1) * per_file); }
  int owner(uint64_t b, int ranks) const { return int(b % uint64_t(ranks)); }
};

Plan make_plan(uint64_t num_samples, uint32_t per_file, uint64_t seed);

// Files go to ranks whole, so when they do not deal evenly some ranks sit idle for part of the run
// (all of it, with fewer files than ranks). The share of the run the ranks work, 1 when even.
double rank_balance(uint64_t samples, uint32_t per_file, int ranks);
// A --per-file that deals the files evenly to `ranks` (as many files per rank as now, at least one).
uint32_t even_per_file(uint64_t samples, uint32_t per_file, int ranks);

// What the plan deals to one rank.
struct RankShare {
  std::vector<uint64_t> files;           // its batch files, in order
  std::vector<uint64_t> samples;         // the sample ids in them, file by file in slot order
  std::vector<uint64_t> files_per_rank;  // every rank's number of batch files
};
RankShare rank_share(const Plan& plan, int rank, int ranks);

}  // namespace convoy::datagen
