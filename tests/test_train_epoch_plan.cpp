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

// Global order: the epoch's sequence is one rank's at the local batch G, whatever the ranks, and
// rank r trains slice r of each of its global batches.
namespace {

PlanOptions global_plan(int epoch, int rank, int ranks, int local, int plan_ranks = 0) {
  PlanOptions o{17, epoch, rank, ranks, true, 2, local, plan_ranks};
  o.order = SampleOrder::global;
  return o;
}

// The epoch's global batches at `ranks` x `local`, each the ranks' slices in rank order.
std::vector<std::vector<Key>> global_batches(const DatasetMeta& meta, int epoch, int ranks, int local,
                                             int plan_ranks = 0) {
  const long long steps = steps_per_epoch(meta, ranks, local);
  std::vector<std::vector<Key>> out(static_cast<size_t>(steps));
  for (int r = 0; r < ranks; ++r) {
    const std::vector<SampleRef> s = rank_stream(meta, global_plan(epoch, r, ranks, local, plan_ranks));
    EXPECT_EQ((long long)s.size(), steps * local) << ranks << " ranks, rank " << r;
    for (size_t i = 0; i < s.size(); ++i) out[i / size_t(local)].push_back(key(s[i]));
  }
  return out;
}

}  // namespace

TEST(EpochPlan, GlobalOrderTrainsEverySampleOncePerEpochAtAnyRanks) {
  for (int ranks = 1; ranks <= 8; ++ranks)
    for (const std::vector<uint32_t>& counts : layouts(ranks))
      for (int local : {1, 3}) {
        const DatasetMeta meta = meta_of(counts);
        const long long G = (long long)ranks * local, steps = samples(meta) / G;
        const std::string what = std::to_string(ranks) + " ranks, " + std::to_string(counts.size()) +
                                 " files, local batch " + std::to_string(local);
        ASSERT_GT(steps, 0) << what;
        for (int epoch : {0, 3}) {
          std::set<Key> seen;
          for (int r = 0; r < ranks; ++r) {
            const std::vector<SampleRef> s = rank_stream(meta, global_plan(epoch, r, ranks, local));
            ASSERT_EQ((long long)s.size(), steps * local) << what << " rank " << r;
            for (const SampleRef& x : s) {
              ASSERT_LT(x.file, counts.size()) << what;
              ASSERT_LT(x.index, counts[x.file]) << what;
              ASSERT_TRUE(seen.insert(key(x)).second) << what << " rank " << r << ": a sample twice";
            }
          }
          EXPECT_EQ((long long)seen.size(), steps * G) << what;
          EXPECT_LT(samples(meta) - steps * G, G) << what;
        }
      }
}

// The same global batch G at 1, 2, 3, 4 and 6 ranks: the same global batches in the same order,
// each sample in the same place; a checkpoint of any of these runs resumes on any other with the
// batches the uninterrupted run of either would train. A plan_ranks changes nothing, and at one
// rank global order is local order.
TEST(EpochPlan, GlobalOrderHasTheSameGlobalBatchesAtAnyRanks) {
  const int G = 12;
  for (const std::vector<uint32_t>& counts : {std::vector<uint32_t>{13, 13, 13, 13, 13, 13, 13, 13, 13, 7},
                                              std::vector<uint32_t>{29, 29, 29}, layouts(4).back()}) {
    const DatasetMeta meta = meta_of(counts);
    const std::string what = std::to_string(counts.size()) + " files";
    for (int epoch : {1, 2}) {
      const std::vector<std::vector<Key>> one = global_batches(meta, epoch, 1, G);
      ASSERT_EQ((long long)one.size(), samples(meta) / G) << what;
      const std::vector<SampleRef> local = stream(meta, epoch, 0, 1, G);
      for (size_t i = 0; i < local.size(); ++i) ASSERT_EQ(one[i / G][i % G], key(local[i])) << what << ", sample " << i;
      for (int ranks : {2, 3, 4, 6}) {
        EXPECT_EQ(global_batches(meta, epoch, ranks, G / ranks), one) << what << ", " << ranks << " ranks";
        EXPECT_EQ(global_batches(meta, epoch, ranks, G / ranks, 1), one) << what << ", " << ranks << " ranks";
      }
    }
    EXPECT_NE(global_batches(meta, 1, 2, G / 2), global_batches(meta, 2, 2, G / 2)) << "another epoch, another order";
  }
}

namespace {

Loader global_loader(const std::string& dir, const DatasetMeta& meta, int rank, int ranks, int local) {
  return Loader(loader_options(dir, local, true, SampleOutput::floats, AugmentSpec{},
                               DataShare{rank, ranks, 5, 2, SampleOrder::global}, 2, 3),
                meta);
}

// The global batches the loaders of `ranks` ranks yield for `epoch` from batch `first`: each the
// ranks' batches in rank order.
std::vector<std::vector<uint64_t>> loader_global_batches(const std::string& dir, const DatasetMeta& meta, int ranks,
                                                         int G, int epoch, long long first, int plan_ranks = 0) {
  std::vector<std::vector<uint64_t>> out;
  for (int r = 0; r < ranks; ++r) {
    Loader l = global_loader(dir, meta, r, ranks, G / ranks);
    const auto batches = keys(l, epoch, first, l.batches_per_epoch(), plan_ranks);
    out.resize(batches.size());
    for (size_t b = 0; b < batches.size(); ++b) out[b].insert(out[b].end(), batches[b].begin(), batches[b].end());
  }
  return out;
}

}  // namespace

// Through the Loader: the same global batches at 1, 2, 3 and 4 ranks, from the epoch's start and from
// a batch mid-epoch (a resume), whatever plan_ranks start_epoch is given; every sample once.
TEST(EpochPlan, LoaderGlobalOrderYieldsTheSameGlobalBatchesAtAnyRanks) {
  const std::string dir = dataset("global", {13, 13, 13, 13, 13, 13, 13, 13, 13, 7});
  const DatasetMeta meta = read_dataset_meta(dir);
  const int G = 12;
  const long long steps = samples(meta) / G, k = 4;
  const auto one = loader_global_batches(dir, meta, 1, G, 2, 0);
  ASSERT_EQ((long long)one.size(), steps);
  std::set<uint64_t> seen;
  for (const auto& b : one)
    for (uint64_t id : b) EXPECT_TRUE(seen.insert(id).second) << "sample " << id << " twice";
  EXPECT_EQ((long long)seen.size(), steps * G);
  for (int ranks : {2, 3, 4}) {
    EXPECT_EQ(loader_global_batches(dir, meta, ranks, G, 2, 0), one) << ranks << " ranks";
    const auto resumed = loader_global_batches(dir, meta, ranks, G, 2, k, 1);
    EXPECT_EQ(resumed, std::vector<std::vector<uint64_t>>(one.begin() + k, one.end())) << ranks << " ranks from " << k;
  }
}
