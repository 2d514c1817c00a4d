// Data parallel on CPU ranks, through mpirun and the real binary: with the same global batches,
// 1, 2 and 3 ranks end with the same weights after 20 steps (to float rounding); uneven shards
// finish without deadlock, with the same step count on every rank.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "shared/atomic_file.h"
#include "train/checkpoint.h"
#include "train/synthetic_data.h"
#include "train_cli.h"

using namespace convoy;
using namespace convoy::test;

namespace {

const std::string kTmp = std::string(CONVOY_TEST_TMP) + "/mpi";

}  // namespace

TEST(DataParallel, RanksAgreeWithOneRank) {
  ASSERT_TRUE(file_exists(kTrain)) << kTrain;
  make_dirs(kTmp);
  const std::string config = kTmp + "/net.toml";
  write_file_atomic(config, kConfig);
  // A one-rank run's checkpoint after its first step, resumed on 2 and 3 ranks: the rest of the
  // epoch trains the one-rank run's global batches (local batches 6 and 4), whose averaged gradients
  // are the one-rank batch's.
  SyntheticSpec spec;
  spec.file_counts.assign(144, 2);
  spec.classes = 4;
  write_synthetic_dataset(kTmp + "/data", spec);
  const std::string common = " --config " + config + " --data " + kTmp + "/data --batch 12 --epochs 1" +
                             " --shuffle-files 1 --threads 1 --log-every 0";
  const std::string start = kTmp + "/start.ckpt", one_path = kTmp + "/ranks1.ckpt";
  for (const std::string& p : {start, one_path}) std::remove(p.c_str());  // train does not write over them
  ASSERT_EQ(run(kTrain + common + " --seed 3 --stop-after 1 --checkpoint " + start), 0);
  ASSERT_EQ(run(kTrain + common + " --seed 3 --stop-after 20 --checkpoint " + one_path), 0);
  const Checkpoint one = read_checkpoint(one_path);
  EXPECT_EQ(one.info.at("global_step").get<long long>(), 20);
  for (int ranks : {2, 3}) {
    const std::string ckpt = kTmp + "/ranks" + std::to_string(ranks) + ".ckpt";
    std::remove(ckpt.c_str());
    ASSERT_EQ(run("mpirun -np " + std::to_string(ranks) + " " + kTrain + " --resume " + start +
                  " --threads 1 --log-every 0 --stop-after 20 --checkpoint " + ckpt),
              0)
        << ranks << " ranks";
    Checkpoint c = read_checkpoint(ckpt);
    EXPECT_EQ(c.info.at("global_step").get<long long>(), 20);
    EXPECT_EQ(c.info.at("ranks").get<int>(), ranks);
    EXPECT_LT(max_diff(one.weights, c.weights), 2e-5) << ranks << " ranks";
    EXPECT_LT(max_diff(one.m, c.m), 2e-5) << ranks << " ranks";
  }
  // The tolerance is far below what a different run gives.
  std::remove((kTmp + "/seed4.ckpt").c_str());
  ASSERT_EQ(run(kTrain + common + " --seed 4 --stop-after 20 --checkpoint " + kTmp + "/seed4.ckpt"), 0);
  EXPECT_GT(max_diff(one.weights, read_checkpoint(kTmp + "/seed4.ckpt").weights), 1e-2);
}

TEST(DataParallel, UnevenShardsNeverDeadlock) {
  make_dirs(kTmp);
  const std::string config = kTmp + "/net.toml";
  write_file_atomic(config, kConfig);
  SyntheticSpec spec;
  spec.file_counts = {10, 10, 10, 10, 10, 10, 3};  // 3 ranks' shares start and end inside files
  spec.classes = 4;
  write_synthetic_dataset(kTmp + "/uneven", spec);
  const std::string metrics = kTmp + "/uneven.jsonl";
  ASSERT_EQ(run("mpirun -np 3 " + kTrain + " --config " + config + " --data " + kTmp + "/uneven --val " + kTmp +
                "/uneven --batch 6 --epochs 3 --threads 1 --log-every 1 --metrics " + metrics),
            0);
  // Rank 0 logs; every rank ran the same steps or the all-reduce would have hung (and timed out).
  long long steps = 0;
  double seen = 0;
  for (const std::string& line : {read_whole_file(metrics)}) {
    size_t at = 0;
    while (at < line.size()) {
      const size_t end = line.find('\n', at);
      const auto j = nlohmann::json::parse(line.substr(at, end - at));
      if (j.at("kind") == "step") steps = j.at("global_step").get<long long>();
      if (j.at("kind") == "epoch") seen = j.at("test_top1").get<double>();
      at = end + 1;
    }
  }
  EXPECT_GT(steps, 0);
  EXPECT_GE(seen, 0.0);
  // A global batch that does not split evenly over the ranks is refused with a clear message.
  EXPECT_NE(run("mpirun -np 2 " + kTrain + " --config " + config + " --data " + kTmp + "/uneven --batch 7 2>/dev/null"),
            0);
}
