// Dataset statistics: the fast per-thread sums (lanes, 16-bit per-pixel counters folded before
// they overflow) give exactly the totals of a plain per-byte loop, and merging is exact.
#include <gtest/gtest.h>

#include <random>

#include "datagen/stats.h"

using namespace convoy;
using namespace convoy::datagen;

namespace {

// The statistics the obvious way: one byte at a time into 64-bit sums.
DatasetSums naive(const std::vector<std::vector<uint8_t>>& samples, const std::vector<int32_t>& labels, size_t classes,
                  const ImageShape& shape) {
  DatasetSums d(classes, shape);
  for (size_t i = 0; i < samples.size(); ++i) {
    ++d.class_counts[size_t(labels[i])];
    ++d.samples;
    for (size_t k = 0; k < shape.bytes(); ++k) {
      const uint64_t v = samples[i][k];
      d.channel_sum[k % shape.channels] += v;
      d.channel_sq[k % shape.channels] += v * v;
      d.pixel_sum[k] += v;
    }
  }
  return d;
}

void expect_equal(const DatasetSums& a, const DatasetSums& b) {
  EXPECT_EQ(a.class_counts, b.class_counts);
  EXPECT_EQ(a.channel_sum, b.channel_sum);
  EXPECT_EQ(a.channel_sq, b.channel_sq);
  EXPECT_EQ(a.pixel_sum, b.pixel_sum);
  EXPECT_EQ(a.samples, b.samples);
}

// Mostly bright bytes, so the 16-bit counters would overflow after 257 samples without a fold.
std::vector<std::vector<uint8_t>> bright_samples(size_t n, const ImageShape& shape, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<uint8_t>> s(n, std::vector<uint8_t>(shape.bytes()));
  for (auto& img : s)
    for (auto& v : img) v = uint8_t(rng() % 4 == 0 ? rng() % 256 : 255);
  return s;
}

}  // namespace

TEST(DatagenStats, SampleSumsEqualThePlainLoopAcrossFoldsAndOddSizes) {
  // 7x5x3 = 105 bytes is no multiple of the 48 lanes; 600 samples pass two folds.
  for (const ImageShape shape :
       {ImageShape{7, 5, 3}, ImageShape{7, 5, 1}, ImageShape{32, 32, 3}, ImageShape{1, 1, 3}}) {
    const auto samples = bright_samples(600, shape, shape.bytes());
    std::vector<int32_t> labels;
    for (size_t i = 0; i < samples.size(); ++i) labels.push_back(int32_t(i * 7 % 5));
    SampleSums fast(5, shape);
    for (size_t i = 0; i < samples.size(); ++i) fast.add(samples[i].data(), labels[i]);
    expect_equal(fast.totals(), naive(samples, labels, 5, shape));
  }
}

TEST(DatagenStats, ThreadSumsMergedInAnyOrderGiveTheSameTotals) {
  const ImageShape shape{8, 8, 3};
  const auto samples = bright_samples(300, shape, 9);
  std::vector<int32_t> labels(samples.size(), 1);
  SampleSums a(3, shape), b(3, shape);
  for (size_t i = 0; i < samples.size(); ++i) (i % 3 ? a : b).add(samples[i].data(), labels[i]);
  DatasetSums ab(3, shape), ba(3, shape);
  ab.merge(a.totals()), ab.merge(b.totals());
  ba.merge(b.totals()), ba.merge(a.totals());
  const DatasetSums want = naive(samples, labels, 3, shape);
  expect_equal(ab, want);
  expect_equal(ba, want);
  EXPECT_EQ(ab.mean(), want.mean());
  EXPECT_EQ(ab.stddev(), want.stddev());
  EXPECT_EQ(ab.mean_image(), want.mean_image());
}

TEST(DatagenStats, ALabelOutsideTheClassesIsAnError) {
  const ImageShape shape{2, 2, 1};
  SampleSums s(2, shape);
  const uint8_t px[4] = {1, 2, 3, 4};
  EXPECT_THROW(s.add(px, 2), std::exception);
  EXPECT_THROW(s.add(px, -1), std::exception);
}
