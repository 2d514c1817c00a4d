// The training epoch plan at any number of ranks: every sample once per epoch except fewer than
// ranks x local batch, each rank reading only the files its contiguous share overlaps, the same
// number of steps on every rank; a run resumed on other ranks trains the global batches the
// checkpoint's ranks would have, every sample still once; the same through the Loader.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "input/epoch_plan.h"
#include "input/loader.h"
#include "shared/dataset_meta.h"
#include "train/synthetic_data.h"

using namespace convoy;

namespace {

const std::string kTmp = std::string(CONVOY_TEST_TMP) + "/epoch_plan";

DatasetMeta meta_of(const std::vector<uint32_t>& counts) {
  DatasetMeta m;
  for (size_t i = 0; i < counts.size(); ++i) {
    m.files.push_back({"f" + std::to_string(i), counts[i], 0, 0});
    m.num_samples += counts[i];
  }
  return m;
}

long long samples(const DatasetMeta& m) { return (long long)m.num_samples; }

std::vector<SampleRef> stream(const DatasetMeta& meta, int epoch, int rank, int ranks, int local, int plan_ranks = 0) {
  return rank_stream(meta, PlanOptions{17, epoch, rank, ranks, true, 2, local, plan_ranks});
}

using Key = std::pair<uint32_t, uint32_t>;
Key key(const SampleRef& r) { return {r.file, r.index}; }

// The layouts the issue names, for `ranks` ranks: fewer files than ranks (when there can be),
// one more file than ranks, and many more; files of uneven size with a short last one.
std::vector<std::vector<uint32_t>> layouts(int ranks) {
  std::vector<std::vector<uint32_t>> out;
  if (ranks > 1) out.push_back(std::vector<uint32_t>(size_t(ranks - 1), 29));
  std::vector<uint32_t> one_more(size_t(ranks + 1), 13);
  one_more.back() = 5;
  out.push_back(one_more);
  std::vector<uint32_t> many;
  for (int f = 0; f < 12 * ranks + 3; ++f) many.push_back(uint32_t(7 + f % 5));
  out.push_back(many);
  return out;
}

}  // namespace

TEST(EpochPlan, EverySampleOncePerEpochAtAnyRanks) {
  for (int ranks = 1; ranks <= 8; ++ranks)
    for (const std::vector<uint32_t>& counts : layouts(ranks))
      for (int local : {1, 3}) {
        const DatasetMeta meta = meta_of(counts);
        const long long G = (long long)ranks * local, steps = samples(meta) / G;
        const std::string what = std::to_string(ranks) + " ranks, " + std::to_string(counts.size()) +
                                 " files, local batch " + std::to_string(local);
        ASSERT_EQ(steps_per_epoch(meta, ranks, local), steps) << what;
        ASSERT_GT(steps, 0) << what;
        for (int epoch : {0, 3}) {
          std::set<Key> seen;
          for (int r = 0; r < ranks; ++r) {
            const std::vector<SampleRef> s = stream(meta, epoch, r, ranks, local);
            ASSERT_GE((long long)s.size(), steps * local) << what << " rank " << r;
            for (long long i = 0; i < steps * local; ++i)
              ASSERT_TRUE(seen.insert(key(s[size_t(i)])).second) << what << " rank " << r << ": a sample twice";
            // File locality: a rank reads the files its share overlaps, no more.
            const size_t files = rank_files(meta, PlanOptions{17, epoch, r, ranks, true, 2, local}).size();
            EXPECT_LE(files, size_t(steps * local / 5 + 2)) << what << " rank " << r;
          }
          // Every sample but fewer than one global batch.
          EXPECT_EQ((long long)seen.size(), steps * G) << what;
          EXPECT_LT(samples(meta) - steps * G, G) << what;
        }
      }
}

TEST(EpochPlan, OrderIsAFunctionOfSeedEpochAndRanks) {
  const DatasetMeta meta = meta_of({13, 13, 13, 13, 13, 5});
  for (int ranks : {1, 2, 3})
    for (int r = 0; r < ranks; ++r) {
      const auto a = stream(meta, 2, r, ranks, 4), b = stream(meta, 2, r, ranks, 4), c = stream(meta, 3, r, ranks, 4);
      ASSERT_EQ(a.size(), b.size());
      EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin(), [](auto x, auto y) { return key(x) == key(y); }));
      EXPECT_FALSE(std::equal(a.begin(), a.end(), c.begin(), [](auto x, auto y) { return key(x) == key(y); }))
          << "another epoch is another order";
    }
}

// A run resumed on R' ranks from a checkpoint of R ranks at step k: each global batch of the rest
// of the epoch holds the samples the R-rank run's batch held, and across the resume every sample
// of the epoch is trained once.
TEST(EpochPlan, ResumedOnOtherRanksTrainsTheSameGlobalBatches) {
  const int G = 24;
  const DatasetMeta meta = meta_of({13, 13, 13, 13, 13, 13, 13, 13, 13, 7});
  const long long steps = samples(meta) / G;
  for (auto [from, to] : {std::pair{2, 1}, {1, 3}, {2, 3}, {4, 2}, {3, 8}, {8, 1}}) {
    const std::string what = std::to_string(from) + " -> " + std::to_string(to) + " ranks";
    std::vector<std::vector<SampleRef>> before, after;
    for (int r = 0; r < from; ++r) before.push_back(stream(meta, 1, r, from, G / from));
    for (int r = 0; r < to; ++r) after.push_back(stream(meta, 1, r, to, G / to, from));
    for (const auto& s : after) ASSERT_GE((long long)s.size(), steps * (G / to)) << what;
    auto batch = [&](const std::vector<std::vector<SampleRef>>& ranks, long long b) {
      std::multiset<Key> out;
      const long long L = G / (long long)ranks.size();
      for (const auto& s : ranks)
        for (long long i = b * L; i < (b + 1) * L; ++i) out.insert(key(s[size_t(i)]));
      return out;
    };
    for (long long b = 0; b < steps; ++b) ASSERT_EQ(batch(before, b), batch(after, b)) << what << ", batch " << b;
    const long long k = steps / 2;
    std::set<Key> seen;
    for (long long b = 0; b < steps; ++b)
      for (const Key& x : batch(b < k ? before : after, b)) ASSERT_TRUE(seen.insert(x).second) << what;
    EXPECT_EQ((long long)seen.size(), steps * G) << what;
  }
}

namespace {

std::string dataset(const std::string& name, const std::vector<uint32_t>& counts) {
  SyntheticSpec spec;
  spec.file_counts = counts;
  spec.shape = {4, 4, 1};
  spec.classes = 3;
  const std::string dir = kTmp + "/" + name;
  write_synthetic_dataset(dir, spec);
  return dir;
}

Loader make_loader(const std::string& dir, const DatasetMeta& meta, int rank, int ranks, int local) {
  return Loader(
      loader_options(dir, local, true, SampleOutput::floats, AugmentSpec{}, DataShare{rank, ranks, 5, 2}, 2, 3), meta);
}

// The sample keys (dataset ids) of `count` batches of `epoch` from batch `first`, batch by batch.
std::vector<std::vector<uint64_t>> keys(Loader& l, int epoch, long long first, long long count, int plan_ranks = 0) {
  l.start_epoch(epoch, first, plan_ranks);
  std::vector<std::vector<uint64_t>> out;
  HostBatch b;
  for (long long k = 0; k < count && l.next(b); ++k) out.push_back(b.keys);
  return out;
}

}  // namespace

TEST(EpochPlan, LoaderYieldsEverySampleOnceAtAnyRanks) {
  // The plan's layouts, but one set of many files (as many as the plan's at 3 ranks) for every
  // number of ranks, which keeps the files written few.
  std::map<std::vector<uint32_t>, std::string> written;
  const std::vector<uint32_t> many = layouts(3).back();
  for (int ranks = 1; ranks <= 8; ++ranks)
    for (std::vector<uint32_t> counts : layouts(ranks)) {
      if (counts.size() > many.size()) counts = many;
      std::string& dir = written[counts];
      if (dir.empty()) dir = dataset("set" + std::to_string(written.size()), counts);
      const DatasetMeta meta = read_dataset_meta(dir);
      const long long G = 3LL * ranks, steps = samples(meta) / G;
      std::set<uint64_t> seen;
      for (int r = 0; r < ranks; ++r) {
        Loader l = make_loader(dir, meta, r, ranks, 3);
        EXPECT_EQ(l.batches_per_epoch(), steps) << ranks << " ranks, rank " << r;
        const auto batches = keys(l, 1, 0, steps + 1);
        ASSERT_EQ((long long)batches.size(), steps) << ranks << " ranks, rank " << r;
        for (const auto& b : batches)
          for (uint64_t id : b) ASSERT_TRUE(seen.insert(id).second) << ranks << " ranks: sample " << id << " twice";
      }
      EXPECT_EQ((long long)seen.size(), steps * G) << ranks << " ranks, " << counts.size() << " files";
    }
}

TEST(EpochPlan, LoaderResumedOnOtherRanksYieldsTheSameGlobalBatches) {
  const std::string dir = dataset("elastic", {13, 13, 13, 13, 13, 13, 13, 13, 13, 7});
  const DatasetMeta meta = read_dataset_meta(dir);
  const int G = 12;
  const long long steps = samples(meta) / G, k = 4;
  for (auto [from, to] : {std::pair{2, 1}, {1, 3}, {2, 3}}) {
    std::vector<std::vector<std::vector<uint64_t>>> before, after;
    for (int r = 0; r < from; ++r) {
      Loader l = make_loader(dir, meta, r, from, G / from);
      before.push_back(keys(l, 2, 0, steps));
    }
    for (int r = 0; r < to; ++r) {
      Loader l = make_loader(dir, meta, r, to, G / to);
      after.push_back(keys(l, 2, k, steps, from));
      ASSERT_EQ((long long)after.back().size(), steps - k);
    }
    std::set<uint64_t> seen;
    for (long long b = 0; b < steps; ++b) {
      std::multiset<uint64_t> was, is;
      for (const auto& r : before) was.insert(r[size_t(b)].begin(), r[size_t(b)].end());
      if (b >= k)
        for (const auto& r : after) is.insert(r[size_t(b - k)].begin(), r[size_t(b - k)].end());
      if (b >= k) EXPECT_EQ(was, is) << from << " -> " << to << " ranks, batch " << b;
      for (uint64_t id : b < k ? was : is) EXPECT_TRUE(seen.insert(id).second) << "sample " << id << " twice";
    }
    EXPECT_EQ((long long)seen.size(), steps * G);
    // The next epoch follows the plan of the ranks the run has now: every rank reads its own share.
    std::set<uint64_t> next;
    for (int r = 0; r < to; ++r) {
      Loader l = make_loader(dir, meta, r, to, G / to);
      keys(l, 2, k, steps, from);
      for (const auto& b : keys(l, 3, 0, steps)) next.insert(b.begin(), b.end());
    }
    EXPECT_EQ((long long)next.size(), steps * G);
  }
}
