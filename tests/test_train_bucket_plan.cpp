// The all-reduce bucket plan (bucket_plan.h) on the shipped nets and on hand-made ranges: the
// buckets cover every parameter once, in the order the backward pass completes them, within their
// size but for one range, and shrink towards the end of the backward pass; and the bytes a step puts
// on the wire.
#include <gtest/gtest.h>

#include <algorithm>

#include "source_dir.h"
#include "train/bucket_plan.h"
#include "train/net.h"
#include "train/net_config.h"

using namespace convoy;

namespace {

Net shipped(const std::string& file) {
  const NetConfig c = read_net_config(test::config_path(file));
  return Net(c, Dims{c.input_c, c.input_h, c.input_w});
}

// The buckets partition [0, total) from the top down, and each is a run of whole ranges.
void expect_partition(const std::vector<FlatRange>& ranges, const std::vector<FlatRange>& buckets, size_t total) {
  ASSERT_FALSE(buckets.empty());
  EXPECT_EQ(buckets.front().hi, total);
  EXPECT_EQ(buckets.back().lo, 0u);
  for (size_t i = 1; i < buckets.size(); ++i) EXPECT_EQ(buckets[i].hi, buckets[i - 1].lo) << "bucket " << i;
  size_t r = 0;
  for (const FlatRange& b : buckets) {
    ASSERT_LT(r, ranges.size());
    EXPECT_EQ(ranges[r].hi, b.hi);
    while (r < ranges.size() && ranges[r].lo > b.lo) ++r;
    ASSERT_LT(r, ranges.size());
    EXPECT_EQ(ranges[r].lo, b.lo) << "a bucket ends inside a range";
    ++r;
  }
  EXPECT_EQ(r, ranges.size());
}

}  // namespace

TEST(BucketPlan, BackwardRangesCoverTheShippedNetsFromTheTopDown) {
  for (const char* file : {"fmnist.toml", "resnet18.toml", "resnet50.toml"}) {
    Net net = shipped(file);
    const std::vector<FlatRange> ranges = backward_ranges(net.nodes());
    ASSERT_FALSE(ranges.empty()) << file;
    EXPECT_EQ(ranges.front().hi, net.weights().size()) << file;
    EXPECT_EQ(ranges.back().lo, 0u) << file;
    for (size_t i = 1; i < ranges.size(); ++i) EXPECT_EQ(ranges[i].hi, ranges[i - 1].lo) << file << " range " << i;
  }
}

TEST(BucketPlan, BucketsPartitionTheBufferWithinTheirSize) {
  for (const char* file : {"fmnist.toml", "resnet18.toml", "resnet50.toml"}) {
    Net net = shipped(file);
    const std::vector<FlatRange> ranges = backward_ranges(net.nodes());
    for (size_t elem : {size_t(2), size_t(4)})
      for (size_t mib : {1, 4, 25}) {
        const size_t most = (mib << 20) / elem;
        const std::vector<FlatRange> buckets = plan_buckets(ranges, elem, mib << 20);
        expect_partition(ranges, buckets, net.weights().size());
        for (const FlatRange& b : buckets) {
          const bool one_range = std::any_of(ranges.begin(), ranges.end(), [&](const FlatRange& r) { return r == b; });
          EXPECT_TRUE(b.size() <= most || one_range) << file << ": " << b.size() << " elements";
        }
      }
  }
}

// ResNet-50's first layers hold about 1.5 M of its 25.6 M parameters but take half of the backward
// pass: with 4 MiB buckets in bf16 (2 M elements), the old rule sent them in one last bucket of up
// to 2 M elements after the stem's gradient; the plan ends in ever smaller buckets instead.
TEST(BucketPlan, TheLastBucketsShrink) {
  Net net = shipped("resnet50.toml");
  const std::vector<FlatRange> ranges = backward_ranges(net.nodes());
  const size_t most = (size_t(4) << 20) / 2, least = most / 16;
  const std::vector<FlatRange> buckets = plan_buckets(ranges, 2, size_t(4) << 20);
  EXPECT_GT(buckets.front().size(), most / 2);
  // The last bucket holds less than `least` and one range; the stem's is 9,408 weights.
  EXPECT_LT(buckets.back().size(), least + 9408);
  // Once less than two full buckets are left to come, a bucket closes at half of what is left (or
  // at `least`): before its lowest range joined, it held less than that.
  size_t after = 0;
  int tail = 0;
  for (size_t i = buckets.size(); i-- > 0;) {
    const FlatRange& b = buckets[i];
    const auto lowest = std::find_if(ranges.begin(), ranges.end(), [&](const FlatRange& r) { return r.lo == b.lo; });
    ASSERT_NE(lowest, ranges.end());
    if (after + lowest->size() < 2 * most) {
      EXPECT_LT(b.size() - lowest->size(), std::max(least, (after + lowest->size()) / 2)) << "bucket " << i;
      ++tail;
    }
    after += b.size();
  }
  EXPECT_GE(tail, 5);              // 2 M elements in ever smaller buckets down to `least`
  EXPECT_GT(buckets.size(), 15u);  // 51 MB in buckets of at most 4 MiB, and the tail
  EXPECT_LT(buckets.size(), 40u);
}

TEST(BucketPlan, RangesThatDoNotAdjoinGoInSeparateBuckets) {
  const std::vector<FlatRange> ranges = {{90, 100}, {80, 90}, {40, 60}, {30, 40}};
  const std::vector<FlatRange> buckets = plan_buckets(ranges, 4, 1 << 20);
  ASSERT_EQ(buckets.size(), 2u);
  EXPECT_EQ(buckets[0], (FlatRange{80, 100}));
  EXPECT_EQ(buckets[1], (FlatRange{30, 60}));
}

TEST(BucketPlan, ARangeLargerThanABucketIsOneBucket) {
  const std::vector<FlatRange> ranges = {{100, 1100}, {90, 100}, {0, 90}};
  const std::vector<FlatRange> buckets = plan_buckets(ranges, 4, 400);  // 100 elements a bucket
  ASSERT_GE(buckets.size(), 2u);
  EXPECT_EQ(buckets[0], (FlatRange{100, 1100}));
  expect_partition(ranges, buckets, 1100);
}

TEST(BucketPlan, WireBytes) {
  EXPECT_EQ(ring_allreduce_bytes(1000, 1), 0.0);
  EXPECT_EQ(ring_allreduce_bytes(1000, 2), 1000.0);
  EXPECT_EQ(ring_allreduce_bytes(1000, 4), 1500.0);
  EXPECT_EQ(ring_allreduce_bytes(1000, 8), 1750.0);
  // ResNet-50 at 2 ranks: every gradient once in bf16 (2 bytes) or fp32 (4), and the 4-byte verdict.
  Net net = shipped("resnet50.toml");
  const std::vector<FlatRange> ranges = backward_ranges(net.nodes());
  const double params = double(net.weights().size());
  EXPECT_EQ(params, 25557032.0);
  EXPECT_EQ(step_wire_bytes(plan_buckets(ranges, 2, 4 << 20), 2, 2), 2 * params + 4);
  EXPECT_EQ(step_wire_bytes(plan_buckets(ranges, 4, 8 << 20), 4, 2), 4 * params + 4);
  EXPECT_EQ(step_wire_bytes(plan_buckets(ranges, 2, 4 << 20), 2, 4), 1.5 * (2 * params + 4));
  EXPECT_EQ(step_wire_bytes(plan_buckets(ranges, 2, 4 << 20), 2, 1), 0.0);
  // fp8: a byte a gradient, and each bucket's 4-byte scale before it.
  const std::vector<FlatRange> b8 = plan_buckets(ranges, 4, 8 << 20);
  EXPECT_EQ(step_wire_bytes(b8, 1, 2, 4), params + 4 + 4.0 * double(b8.size()));
  EXPECT_EQ(step_wire_bytes(b8, 1, 2, 4) - step_wire_bytes(b8, 1, 2), 4.0 * double(b8.size()));
}
