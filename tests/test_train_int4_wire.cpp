// The int4 wire's CPU reference (int4_wire.h): the chunks cover a bucket, the bytes on the wire are
// the chunks' blocks, a block's scale is rounded up, its rounding is exact on its own grid, unbiased
// between grid values and lands on a neighbouring one; a non-finite gradient poisons its block; and
// four ranks' passes, run here one after the other, give every rank the same sums, within a few steps
// of the exact ones and equal to them on average over the draws.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
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
  EXPECT_EQ(b.blocks, 8u);  // 32 blocks of 32 hold 1000, 8 a rank
  EXPECT_EQ(b.chunk_bytes(), 8u * 18u);
  EXPECT_EQ(int4_bucket({0, 32 * 12 + 1}, 4, 0).blocks, 4u);  // 13 blocks: 4 a chunk, the last 3 padded
  EXPECT_EQ(int4_allreduce_bytes(1000, 1), 0.0);
  EXPECT_EQ(int4_allreduce_bytes(1000, 4), 2.0 * 3 * 8 * 18);
  EXPECT_EQ(int4_allreduce_bytes(64 * 1024, 2), 2.0 * 1 * 1024 * 18);
  EXPECT_DOUBLE_EQ(kInt4BytesPerGradient, 0.5625);
  // A step at 2 ranks: the verdict's 4 bytes, then a chunk of ceil(n / 64) blocks each way a bucket
  // (18 bytes a block), or with fp8 there 32 bytes a block of the padded chunk and a 4-byte scale.
  const std::vector<FlatRange> buckets{{0, 1000}, {1000, 1064}, {1064, 1065}};
  EXPECT_EQ(int4_step_wire_bytes(buckets, 2, false), 4 + 2 * 18.0 * (16 + 1 + 1));
  EXPECT_EQ(int4_step_wire_bytes(buckets, 2, true), 4 + (32 + 18.0) * (16 + 1 + 1) + 3 * 4);
  EXPECT_EQ(int4_step_wire_bytes(buckets, 1, true), 0.0);
}

// fp4's eight magnitudes, in units of the scale.
const float kMagnitudes[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};

TEST(Int4Wire, AValueOnItsBlocksGridGoesExactly) {
  float x[kInt4Block];
  for (size_t i = 0; i < kInt4Block; ++i) x[i] = (i % 2 ? -0.25f : 0.25f) * kMagnitudes[i % 8];
  x[3] = 1.5f;  // the largest: scale 1.5 / 6 = 0.25, a bf16
  for (uint64_t key : {1ull, 2ull, 99ull}) {
    const Int4Block b = int4_round(x, kInt4Block, key, 0, 0);
    EXPECT_EQ(int4_scale(b.scale), 0.25f);
    for (size_t i = 0; i < kInt4Block; ++i) EXPECT_EQ(int4_value(b, i), x[i]) << i;
  }
  const float zeros[3] = {0, 0, 0};
  const Int4Block z = int4_round(zeros, 3, 5, 0, 0);
  EXPECT_EQ(int4_scale(z.scale), 0.f);
  for (size_t i = 0; i < kInt4Block; ++i) EXPECT_EQ(int4_value(z, i), 0.f);
}

// The scale is the largest magnitude / 6 rounded up to bf16, so that nothing is clipped: the largest
// goes as at most 6 steps of it.
TEST(Int4Wire, TheScaleIsRoundedUp) {
  for (float max : {0.7f, 1e-9f, 3.3e5f, 1.f / 3.f}) {
    const float s = int4_scale(int4_scale_bits(max));
    EXPECT_GE(s * 6.f, max) << max;
    EXPECT_LT(s * 6.f, max * (1.f + 1.f / 64.f)) << max;
  }
}

// Between grid values a value goes to one of its two neighbours, up with the fraction's probability:
// its mean over many draws is the value.
TEST(Int4Wire, RoundingIsUnbiasedBetweenNeighbouringValues) {
  float x[kInt4Block];
  for (size_t i = 0; i < kInt4Block; ++i) x[i] = float(std::sin(double(i))) * 0.7f;
  x[5] = 0.7f;  // the largest
  std::vector<double> mean(kInt4Block, 0.0);
  const int draws = 20000;
  for (int k = 0; k < draws; ++k) {
    const Int4Block b = int4_round(x, kInt4Block, uint64_t(k) + 1, 3, 640);
    const float scale = int4_scale(b.scale);
    for (size_t i = 0; i < kInt4Block; ++i) {
      const float a = std::fabs(x[i]), v = std::fabs(int4_value(b, i));
      size_t m = 0;
      while (m + 1 < 8 && kMagnitudes[m + 1] * scale <= a) ++m;
      const float lo = kMagnitudes[m] * scale, hi = kMagnitudes[std::min<size_t>(m + 1, 7)] * scale;
      ASSERT_TRUE(v == lo || v == hi) << i << ": " << x[i] << " went as " << v << ", not " << lo << " or " << hi;
      mean[i] += double(int4_value(b, i)) / draws;
    }
  }
  // A draw's spread is at most half a step (0.24 at the largest); over 20,000 its mean's is below 0.002.
  for (size_t i = 0; i < kInt4Block; ++i) EXPECT_NEAR(mean[i], x[i], 6e-3) << i;
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

// fp8_int4's owner rounds its chunk of sums as int4's owner rounds its own gradients plus nothing
// dealt: the same draws, the same blocks.
TEST(Int4Wire, AChunkOfSumsRoundsAsTheOwnersSum) {
  const FlatRange r{64, 64 + 3000};
  const std::vector<std::vector<float>> g = gradients(3, 4000);
  const Int4Bucket b = int4_bucket(r, 3, 1);
  std::vector<float> chunk(b.blocks * kInt4Block, 0.f);
  for (size_t i = 0; i < chunk.size(); ++i) {
    const size_t e = r.lo + b.blocks * kInt4Block + i;
    if (e < r.hi) chunk[i] = g[1][e];
  }
  std::vector<Int4Block> nothing(3 * b.blocks), summed(b.blocks), rounded(b.blocks);
  for (Int4Block& z : nothing) z = int4_round(chunk.data(), 0, 1, 0, 0);  // zeros
  int4_sum_own(b, g[1].data(), nothing.data(), 77, summed.data());
  int4_round_chunk(b, chunk.data(), 77, rounded.data());
  ASSERT_EQ(std::memcmp(summed.data(), rounded.data(), b.blocks * sizeof(Int4Block)), 0);
}
