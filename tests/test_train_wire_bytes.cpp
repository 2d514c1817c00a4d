// The bytes each step puts on the wire, as train's epoch record and breakdown line give them, on the
// CPU backend through mpirun: every fp32 gradient and the 4-byte verdict on the loss, counted as a
// ring all-reduce sends them (2 (ranks - 1) / ranks of the buffer); none on one rank.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "shared/atomic_file.h"
#include "train/checkpoint.h"
#include "train/synthetic_data.h"
#include "train_cli.h"

using namespace convoy;
using namespace convoy::test;

namespace {

const std::string kTmp = std::string(CONVOY_TEST_TMP) + "/wire_bytes";

nlohmann::json last_epoch_record(const std::string& path) {
  nlohmann::json last;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.at("kind") == "epoch") last = j;
  }
  return last;
}

}  // namespace

TEST(WireBytes, EpochRecordAndLineCountTheGradientsAllReduce) {
  make_dirs(kTmp);  // first: kTrain is a path through <build>/tests/tmp
  ASSERT_TRUE(file_exists(kTrain)) << kTrain;
  write_file_atomic(kTmp + "/net.toml", kConfig);
  SyntheticSpec spec;
  spec.file_counts.assign(24, 6);
  spec.classes = 4;
  write_synthetic_dataset(kTmp + "/data", spec);
  for (int ranks : {1, 2, 3}) {
    const std::string name = kTmp + "/ranks" + std::to_string(ranks);
    // A fresh run each time: train refuses to write over a checkpoint it did not resume from, and
    // this folder outlives a test run.
    std::remove((name + ".jsonl").c_str());
    std::remove((name + ".ckpt").c_str());
    ASSERT_EQ(run("mpirun -np " + std::to_string(ranks) + " " + kTrain + " --config " + kTmp + "/net.toml --data " +
                  kTmp + "/data --batch 12 --epochs 1 --threads 1 --log-every 0 --device cpu --metrics " + name +
                  ".jsonl --checkpoint " + name + ".ckpt 2> " + name + ".err"),
              0)
        << ranks << " ranks";
    const double params = double(read_checkpoint(name + ".ckpt").weights.size());
    const double share = 2.0 * (ranks - 1) / ranks;
    const nlohmann::json epoch = last_epoch_record(name + ".jsonl");
    EXPECT_NEAR(epoch.at("comm_bytes_per_step").get<double>(), share * (4 * params + 4), 1e-9 * params) << ranks;
    EXPECT_GE(epoch.at("t_comm_exposed").get<double>(), 0.0);
    // The wait for the epoch's first batch is a part of the epoch's wait for the loader.
    EXPECT_GE(epoch.at("t_io_first").get<double>(), 0.0);
    EXPECT_LE(epoch.at("t_io_first").get<double>(), epoch.at("t_io").get<double>());
    char text[64];
    std::snprintf(text, sizeof text, "(%.2f MB a step on the wire)", share * (4 * params + 4) / 1e6);
    EXPECT_NE(read_whole_file(name + ".err").find(text), std::string::npos) << text << " in\n"
                                                                            << read_whole_file(name + ".err");
  }
}
