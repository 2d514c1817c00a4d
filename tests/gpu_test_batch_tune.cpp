// The batch-size sweep on the CUDA backend through the real binary (CONVOY_TRAIN names it away from
// the build folder): a net whose step at the data's 256 samples per batch is far beyond any GPU's
// memory ends the sweep at the first size that does not fit, without failing; that size is never
// chosen, and --batch auto then trains at the choice.
#include <gtest/gtest.h>

#include <cctype>
#include <sstream>

#include "nonfinite_case.h"

using namespace convoy;
using namespace convoy::test;

namespace {

// A 3x3 convolution of 2,048 filters at 224 px: 103 M values an image for its output, about 0.8 GB
// an image in fp32 with its gradient, so 256 images need over 200 GB (128: over 100 GB); and from
// 32 images on, its output is more values than a cuDNN tensor holds (2^31 - 1), which ends the
// sweep first on a GPU of more than about 25 GB.
const char* kWideConv = R"(
[train]
batch = 32
lr = 0.01
[[layer]]
type = "conv"
filters = 2048
kernel = 3
pad = 1
[[layer]]
type = "relu"
[[layer]]
type = "global_avg_pool"
[[layer]]
type = "fc"
units = "classes"
[[layer]]
type = "softmax_xent"
)";

// <dir>/data (256 samples of 224 px) and <dir>/wide_conv.toml.
void prepare(const std::string& dir) {
  ASSERT_TRUE(file_exists(kTrain)) << kTrain;
  if (!file_exists(dir + "/data/dataset.json")) {
    ASSERT_EQ(
        run(kTrain + " synth --out " + dir + "/data --files 2 --per-file 128 --size 224 --channels 3 --classes 10"), 0);
  }
  write_file_atomic(dir + "/wide_conv.toml", kWideConv);
}

// The table's rows: batch and whether it fitted (a row of "-" images/s did not).
struct Row {
  int batch = 0;
  bool fits = false;
};

std::vector<Row> table_rows(const std::string& text) {
  std::vector<Row> rows;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const size_t at = line.find_first_not_of(' ', line.find("train:") == 0 ? 6 : 0);
    if (at == std::string::npos || !std::isdigit(static_cast<unsigned char>(line[at]))) continue;
    std::istringstream fields(line.substr(at));
    Row r;
    std::string rate;
    if (!(fields >> r.batch >> rate)) continue;
    r.fits = rate != "-";
    rows.push_back(r);
  }
  return rows;
}

int chosen_batch(const std::string& text) {
  const std::string key = "chosen batch: ";
  const size_t at = text.find(key);
  return at == std::string::npos ? -1 : std::stoi(text.substr(at + key.size()));
}

}  // namespace

TEST(GpuBatchTune, SweepEndsAtTheFirstSizeThatDoesNotFitAndNeverChoosesIt) {
  const std::string dir = scratch_dir("convoy_gpu_batch_tune", "oom");
  ASSERT_NO_FATAL_FAILURE(prepare(dir));
  const std::string out = dir + "/tune.out";
  const Outcome o = train_run(dir, "tune",
                              "tune-batch --config " + dir + "/wide_conv.toml --data " + dir +
                                  "/data --device cuda --threads 1 > " + out);
  ASSERT_EQ(o.rc, 0) << o.err;
  const std::string text = read_whole_file(out);
  const std::vector<Row> rows = table_rows(text);
  ASSERT_GE(rows.size(), 2u) << text;
  EXPECT_EQ(rows[0].batch, 1) << text;
  EXPECT_FALSE(rows.back().fits) << "no size ran out of memory: " << text;
  EXPECT_LE(rows.back().batch, 256) << text;
  for (size_t i = 0; i + 1 < rows.size(); ++i) {
    EXPECT_TRUE(rows[i].fits) << text;
    EXPECT_EQ(rows[i + 1].batch, 2 * rows[i].batch) << text;
  }
  // The first size that does not fit: out of the GPU's memory, or (on a GPU with more memory than
  // that) a tensor of more values than cuDNN takes, which this wide convolution reaches at 32.
  EXPECT_EQ(lines_containing(text, "out of memory").size() + lines_containing(text, "too large").size(), 1u) << text;
  const int chosen = chosen_batch(text);
  EXPECT_GE(chosen, 1) << text;
  EXPECT_LT(chosen, rows.back().batch) << text;
  EXPECT_NE(text.find("HPL-derived batch"), std::string::npos) << text;
}

TEST(GpuBatchTune, BatchAutoTrainsAtTheChoice) {
  const std::string dir = scratch_dir("convoy_gpu_batch_tune", "oom");
  ASSERT_NO_FATAL_FAILURE(prepare(dir));
  const Outcome o = train_run(
      dir, "auto",
      "--config " + dir + "/wide_conv.toml --data " + dir +
          "/data --batch auto --device cuda --threads 1 --epochs 1 --stop-after 2 --log-every 1");
  ASSERT_EQ(o.rc, 0) << o.err;
  const int chosen = chosen_batch(o.err);
  ASSERT_GE(chosen, 1) << o.err;
  EXPECT_NE(o.err.find("--batch auto: batch " + std::to_string(chosen) + " (" + std::to_string(chosen) + " per rank)"),
            std::string::npos)
      << o.err;
  EXPECT_EQ(lines_containing(o.err, "epoch 1 step ").size(), 2u) << o.err;
  EXPECT_TRUE(lines_containing(o.err, "error").empty()) << o.err;
}
