// The int4 wire's CPU reference (int4_wire.h): the chunks cover a bucket, the bytes on the wire are
// the chunks' blocks, a block's rounding is exact on its own steps, unbiased between them and lands
// on a neighbouring step; a non-finite gradient poisons its block; and four ranks' passes, run here
// one after the other, give every rank the same sums, within a few steps of the exact ones and equal
// to them on average over the draws.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "train/int4_wire.h"

using namespace convoy;

namespace {

// Four ranks' whole all-reduce of their gradients g[r] (flat buffers), the blocks moved by hand as
// the all-to-all and the all-gather would: each rank's widened sums.
std::vector<std::vector<float>> all_reduce(const FlatRange& r, const std::vector<std::vector<float>>& g, uint64_t key) {
  const int ranks = int(g.size());
  const size_t blocks = int4_bucket(r, ranks, 0).blocks;
  std::vector<std::vector<Int4Block>> sent(size_t(ranks), std::vector<Int4Block>(size_t(ranks) * blocks));
  for (int j = 0; j < ranks; ++j) int4_deal(int4_bucket(r, ranks, j), g[size_t(j)].data(), key, sent[size_t(j)].data());
  std::vector<Int4Block> all(size_t(ranks) * blocks);
  for (int j = 0; j < ranks; ++j) {
    std::vector<Int4Block> recv(size_t(ranks) * blocks);  // what each rank i dealt j
    for (int i = 0; i < ranks; ++i)
      for (size_t k = 0; k < blocks; ++k) recv[size_t(i) * blocks + k] = sent[size_t(i)][size_t(j) * blocks + k];
    int4_sum_own(int4_bucket(r, ranks, j), g[size_t(j)].data(), recv.data(), key, all.data() + size_t(j) * blocks);
  }
  std::vector<std::vector<float>> sums(size_t(ranks), std::vector<float>(g[0].size(), -1.f));
  for (int j = 0; j < ranks; ++j) int4_widen(int4_bucket(r, ranks, j), all.data(), sums[size_t(j)].data());
  return sums;
}

std::vector<std::vector<float>> gradients(int ranks, size_t n) {
  std::vector<std::vector<float>> g(size_t(ranks), std::vector<float>(n, 0.f));
  for (int j = 0; j < ranks; ++j)
    for (size_t i = 0; i < n; ++i)  // magnitudes over three decades within a block, signs mixed
      g[size_t(j)][i] = float(std::sin(0.37 * double(i) + j) * std::pow(10.0, double(i % 7) / 3.0 - 2.0));
  return g;
}

}  // namespace

TEST(Int4Wire, ChunksCoverTheBucketAndTheBytesAreTheirBlocks) {
  const Int4Bucket b = int4_bucket({100, 100 + 1000}, 4, 2);
  EXPECT_EQ(b.blocks, 4u);  // 16 blocks of 64 hold 1000, 4 a rank
  EXPECT_EQ(b.chunk_bytes(), 4u * 36u);
  EXPECT_EQ(int4_bucket({0, 64 * 12 + 1}, 4, 0).blocks, 4u);  // 13 blocks: 4 a chunk, the last 3 padded
  EXPECT_EQ(int4_allreduce_bytes(1000, 1), 0.0);
  EXPECT_EQ(int4_allreduce_bytes(1000, 4), 2.0 * 3 * 4 * 36);
  EXPECT_EQ(int4_allreduce_bytes(64 * 1024, 2), 2.0 * 1 * 512 * 36);
  EXPECT_DOUBLE_EQ(kInt4BytesPerGradient, 0.5625);
}

TEST(Int4Wire, AValueOnItsBlocksStepsGoesExactly) {
  float x[kInt4Block];
  for (size_t i = 0; i < kInt4Block; ++i) x[i] = float(int(i % 15) - 7) * 0.25f;  // steps of 1.75 / 7
  for (uint64_t key : {1ull, 2ull, 99ull}) {
    const Int4Block b = int4_round(x, kInt4Block, key, 0, 0);
    EXPECT_EQ(b.scale, 0.25f);
    for (size_t i = 0; i < kInt4Block; ++i) EXPECT_EQ(int4_value(b, i), x[i]) << i;
  }
  const float zeros[3] = {0, 0, 0};
  const Int4Block z = int4_round(zeros, 3, 5, 0, 0);
  EXPECT_EQ(z.scale, 0.f);
  for (size_t i = 0; i < kInt4Block; ++i) EXPECT_EQ(int4_value(z, i), 0.f);
}

// Between steps a value goes to one of its two neighbours, up with the fraction's probability: its
// mean over many draws is the value.
TEST(Int4Wire, RoundingIsUnbiasedBetweenNeighbouringSteps) {
  float x[kInt4Block];
  for (size_t i = 0; i < kInt4Block; ++i) x[i] = float(std::sin(double(i))) * 0.7f;
  x[5] = 0.7f;  // the largest: scale 0.1
  std::vector<double> mean(kInt4Block, 0.0);
  const int draws = 20000;
  for (int k = 0; k < draws; ++k) {
    const Int4Block b = int4_round(x, kInt4Block, uint64_t(k) + 1, 3, 640);
    for (size_t i = 0; i < kInt4Block; ++i) {
      const float v = int4_value(b, i), lo = std::floor(x[i] / 0.1f) * 0.1f;
      ASSERT_LE(std::fabs(v - x[i]), 0.1f + 1e-6f) << i;
      ASSERT_TRUE(std::fabs(v - lo) < 1e-6f || std::fabs(v - lo - 0.1f) < 1e-6f) << i << " " << v;
      mean[i] += double(v) / draws;
    }
  }
  // A draw's spread is at most half a step (0.05); over 20,000 its mean's is below 0.0004.
  for (size_t i = 0; i < kInt4Block; ++i) EXPECT_NEAR(mean[i], x[i], 2e-3) << i;
}

TEST(Int4Wire, ANonFiniteGradientPoisonsItsBlock) {
  for (float bad : {std::nanf(""), INFINITY, -INFINITY}) {
    float x[kInt4Block];
    for (size_t i = 0; i < kInt4Block; ++i) x[i] = 0.01f * float(i);
    x[9] = bad;
    const Int4Block b = int4_round(x, kInt4Block, 7, 0, 0);
    for (size_t i = 0; i < kInt4Block; ++i) EXPECT_FALSE(std::isfinite(int4_value(b, i))) << bad << " " << i;
  }
}

// 4 ranks, a bucket that is not a whole number of chunks and starts inside the flat buffer.
TEST(Int4Wire, FourRanksGetTheSameSumsNearTheExactOnes) {
  const size_t n = 5000;
  const FlatRange r{300, 300 + 4321};
  const std::vector<std::vector<float>> g = gradients(4, n);
  const std::vector<std::vector<float>> sums = all_reduce(r, g, 42);
  for (int j = 1; j < 4; ++j) EXPECT_EQ(sums[size_t(j)], sums[0]) << j;
  double err = 0, norm = 0;
  for (size_t i = 0; i < n; ++i) {
    if (i < r.lo || i >= r.hi) {
      EXPECT_EQ(sums[0][i], -1.f) << i;  // outside the bucket: untouched
      continue;
    }
    const double exact = double(g[0][i]) + g[1][i] + g[2][i] + g[3][i];
    err += (sums[0][i] - exact) * (sums[0][i] - exact);
    norm += exact * exact;
  }
  const double rel = std::sqrt(err / norm);
  EXPECT_LT(rel, 0.35);
  EXPECT_GT(rel, 0.01);  // 4 bits: the rounding shows
  std::printf("int4 sums of 4 ranks: relative L2 error %.3f\n", rel);
}

TEST(Int4Wire, TheSumsAreTheExactOnesOnAverageOverTheDraws) {
  const size_t n = 700;
  const FlatRange r{0, n};
  const std::vector<std::vector<float>> g = gradients(3, n);
  std::vector<double> mean(n, 0.0);
  const int keys = 4000;
  for (int k = 0; k < keys; ++k) {
    const std::vector<std::vector<float>> sums = all_reduce(r, g, uint64_t(k) * 7919 + 3);
    for (size_t i = 0; i < n; ++i) mean[i] += double(sums[0][i]) / keys;
  }
  double err = 0, norm = 0;
  for (size_t i = 0; i < n; ++i) {
    const double exact = double(g[0][i]) + g[1][i] + g[2][i];
    err += (mean[i] - exact) * (mean[i] - exact);
    norm += exact * exact;
  }
  EXPECT_LT(std::sqrt(err / norm), 0.01);
}
