// The rules --batch auto decides by: the fastest fitting size with ties within 1 % to the smaller,
// seed 002's HPL-derived size, the linear lr scaling, and the table that shows them.
#include <gtest/gtest.h>

#include "train/batch_choice.h"

using namespace convoy;

namespace {

BatchTrial fitted(int batch, double images_per_s) {
  BatchTrial t;
  t.batch = batch;
  t.images_per_s = images_per_s;
  t.memory_bytes = double(batch) * (1 << 20);
  return t;
}

BatchTrial out_of_memory(int batch) {
  BatchTrial t;
  t.batch = batch;
  t.no_fit = "out of memory: cuda:0: the step needs 90000 MiB";
  return t;
}

}  // namespace

TEST(BatchChoice, FastestFittingSizeWins) {
  EXPECT_EQ(fastest_batch({fitted(1, 100), fitted(2, 180), fitted(4, 300), fitted(8, 250)}), 4);
  // A size that ran out of memory is never chosen, however its figure reads.
  BatchTrial oom = out_of_memory(16);
  oom.images_per_s = 1e9;
  EXPECT_EQ(fastest_batch({fitted(1, 100), fitted(8, 250), oom}), 8);
}

TEST(BatchChoice, TiesWithinOnePercentGoToTheSmaller) {
  EXPECT_EQ(fastest_batch({fitted(32, 995), fitted(64, 1000)}), 32);  // 0.5 % slower: a tie
  EXPECT_EQ(fastest_batch({fitted(32, 985), fitted(64, 1000)}), 64);  // 1.5 % slower: not
  EXPECT_EQ(fastest_batch({fitted(16, 991), fitted(32, 995), fitted(64, 1000)}), 16);
}

TEST(BatchChoice, NoneFittedIsZero) {
  EXPECT_EQ(fastest_batch({}), 0);
  EXPECT_EQ(fastest_batch({out_of_memory(1)}), 0);
}

// The seed's own case: 28x28 single-precision images, 1,638,400 / 25,088 = 65.3 -> 2^6 = 64.
TEST(BatchChoice, HplSizeIsTheSeedsForMnist) {
  const HplBatch h = hpl_batch(Dims{1, 28, 28});
  EXPECT_EQ(h.tile_bits, 1638400.0);
  EXPECT_EQ(h.image_bits, 25088.0);
  EXPECT_EQ(h.exponent, 6);
  EXPECT_EQ(h.batch, 64);
  EXPECT_EQ(hpl_batch(Dims{3, 32, 32}).batch, 16);       // 1638400 / 98304 = 16.7 -> 2^4
  EXPECT_EQ(hpl_batch(Dims{3, 224, 224}).exponent, -2);  // 0.34: at least one image
  EXPECT_EQ(hpl_batch(Dims{3, 224, 224}).batch, 1);
}

TEST(BatchChoice, LrScalesLinearlyWithTheGlobalBatch) {
  EXPECT_DOUBLE_EQ(scaled_lr(0.1, 256, 512), 0.2);
  EXPECT_DOUBLE_EQ(scaled_lr(0.1, 256, 64), 0.025);
  EXPECT_DOUBLE_EQ(scaled_lr(0.05, 30, 30), 0.05);
}

TEST(BatchChoice, ReportHasTheTableTheChoiceAndTheHplSize) {
  BatchSweep s;
  s.trials = {fitted(1, 100), fitted(2, 180), out_of_memory(4)};
  s.per_rank = 2;
  s.ranks = 2;
  s.method = "timed";
  s.limit = "sizes 1 to 4";
  s.hpl = hpl_batch(Dims{1, 28, 28});
  const std::vector<std::string> lines = sweep_report(s);
  ASSERT_EQ(lines.size(), 8u);
  EXPECT_NE(lines[2].find("images/s"), std::string::npos);
  EXPECT_NE(lines[4].find("180.0"), std::string::npos) << lines[4];
  EXPECT_NE(lines[4].find("2.00 MiB"), std::string::npos) << lines[4];
  EXPECT_NE(lines[5].find("out of memory"), std::string::npos) << lines[5];
  EXPECT_NE(lines[6].find("chosen batch: 2 per rank (4 in all on 2 ranks)"), std::string::npos) << lines[6];
  EXPECT_NE(lines[7].find("= 2^6 -> 64"), std::string::npos) << lines[7];
}
