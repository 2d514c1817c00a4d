// A loss that overflows to NaN on the CPU backend, through the real binary: the run stops at that
// step with one error line naming it and leaves its last checkpoint as it was; --skip-nonfinite
// skips such steps (no update, batch norm's running statistics kept), counts them in the metrics
// and completes; under mpirun -np 2 the ranks stop or skip together.
#include <gtest/gtest.h>

#include "nonfinite_case.h"

using namespace convoy;
using namespace convoy::test;

namespace {

const std::string kTmp = std::string(CONVOY_TEST_TMP) + "/nonfinite";

}  // namespace

TEST(NonFiniteLoss, FcNetStopsOrSkips) {
  ASSERT_NO_FATAL_FAILURE(prepare_overflow(kTmp));
  EXPECT_EQ(check_nonfinite(kTmp, "fc", "--device cpu", "cpu-fc"), 4);
}

TEST(NonFiniteLoss, BatchNormNetStopsOrSkips) {
  ASSERT_NO_FATAL_FAILURE(prepare_overflow(kTmp));
  EXPECT_GE(check_nonfinite(kTmp, "bn", "--device cpu", "cpu-bn"), 2);
}

TEST(NonFiniteLoss, TwoRanksStopOrSkipTogether) {
  ASSERT_NO_FATAL_FAILURE(prepare_overflow(kTmp));
  const std::string common = "--config " + kTmp + "/bn.toml --data " + kTmp +
                             "/data --epochs 2 --batch 8 --threads 1 --seed 3 --log-every 0 --device cpu";
  const Outcome stop = train_run(kTmp, "ranks-stop", common, "mpirun -np 2 ");
  EXPECT_NE(stop.rc, 0);
  EXPECT_GE(nonfinite_step(stop.err), 2) << stop.err;
  const std::string metrics = kTmp + "/ranks-skip.jsonl";
  std::remove(metrics.c_str());
  const Outcome skip = train_run(kTmp, "ranks-skip", common + " --skip-nonfinite --metrics " + metrics,
                                 "mpirun -np 2 ");
  ASSERT_EQ(skip.rc, 0) << skip.err;
  EXPECT_GT(skipped_steps(metrics), 0);
}
