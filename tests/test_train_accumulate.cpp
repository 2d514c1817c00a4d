// [train] accumulate = k on the CPU backend: the config key and its refusals; a batch trained as k
// micro-batches ends where the whole batch in one does (to float rounding: the gradients are summed
// in another order), dropout being drawn by sample; batch norm's statistics are each micro-batch's;
// a NaN loss in any micro-batch skips the whole step and leaves no gradient behind. Through the real
// binary: 1 and 2 ranks at 1 to 6 micro-batches a step end where one rank without accumulation
// does, a resumed run repeats the uninterrupted one, and a global batch that ranks x k does not
// divide is refused naming the key.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "config_error.h"
#include "rel_l2.h"
#include "shared/atomic_file.h"
#include "shared/error.h"
#include "train/checkpoint.h"
#include "train/cpu_step.h"
#include "train/net.h"
#include "train/net_config.h"
#include "train/optimizer.h"
#include "train/synthetic_data.h"
#include "train_cli.h"

using namespace convoy;
using namespace convoy::test;

namespace {

const std::string kTmp = std::string(CONVOY_TEST_TMP) + "/accumulate";
const Dims kInput{1, 8, 8};
constexpr int kClasses = 4;

// kConfig's net (convolution, fc layers, dropout) or one with batch norm after its convolution.
NetConfig config(int accumulate, bool batch_norm = false) {
  std::string text = kConfig;
  text.replace(text.find("[train]\n"), 8, "[train]\naccumulate = " + std::to_string(accumulate) + "\n");
  if (batch_norm) text.replace(text.find("[[layer]]\ntype = \"relu\""), 0, "[[layer]]\ntype = \"batch_norm\"\n");
  return parse_net_config(text, "net.toml");
}

// count batches of n normalised samples with their labels and (dropout) keys.
std::vector<HostBatch> batches(int n, int count, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> pixel(0.f, 1.f);
  std::vector<HostBatch> out;
  for (int b = 0; b < count; ++b) {
    HostBatch hb;
    hb.n = n;
    for (size_t i = 0; i < size_t(n) * kInput.size(); ++i) hb.x.push_back(pixel(rng));
    for (int i = 0; i < n; ++i) {
      hb.labels.push_back(int32_t(rng() % kClasses));
      hb.keys.push_back(uint64_t(100 * b + i));
    }
    out.push_back(std::move(hb));
  }
  return out;
}

// A run's end: the weights, running statistics and momentum, the epoch's sums, the first step
// whose loss was not finite.
struct Trained {
  std::vector<float> weights, state, m;
  EpochSums sums;
  long long nonfinite = -1;
};

Trained train(const NetConfig& cfg, const std::vector<HostBatch>& data, bool skip_nonfinite = false) {
  Net net(cfg, kInput, kClasses);
  net.init_weights(5);
  Optimizer opt(cfg.train, net);
  CpuStep step(net, opt, 1, skip_nonfinite, nullptr, cfg.train.accumulate);
  Trained t;
  for (size_t k = 0; k < data.size(); ++k) step.train(data[k], 900 + k, 0.05, t.sums);
  t.weights = net.weights();
  t.state = net.state();
  t.m = opt.m;
  t.nonfinite = step.first_nonfinite().step;
  return t;
}

// The batch's samples [from, from + n).
HostBatch slice(const HostBatch& b, int from, int n) {
  HostBatch s;
  s.n = n;
  const size_t per = b.x.size() / size_t(b.n);
  s.x.assign(b.x.begin() + long(from * per), b.x.begin() + long((from + n) * per));
  s.labels.assign(b.labels.begin() + from, b.labels.begin() + from + n);
  s.keys.assign(b.keys.begin() + from, b.keys.begin() + from + n);
  return s;
}

// A convolution (with batch norm after it) and an fc layer, nothing between them that could mask a
// NaN (a ReLU, a max pool): a NaN pixel makes the loss NaN.
NetConfig plain_config(int accumulate, bool batch_norm) {
  return parse_net_config("[train]\naccumulate = " + std::to_string(accumulate) +
                              "\n[[layer]]\ntype = \"conv\"\nfilters = 4\nkernel = 3\npad = 1\n" +
                              (batch_norm ? "[[layer]]\ntype = \"batch_norm\"\n" : "") +
                              "[[layer]]\ntype = \"flatten\"\n[[layer]]\ntype = \"fc\"\nunits = \"classes\"\n"
                              "[[layer]]\ntype = \"softmax_xent\"\n",
                          "plain.toml");
}

// A NaN among sample i's pixels.
void poison(HostBatch& b, int i) { b.x[size_t(i) * kInput.size() + 5] = std::nanf(""); }

}  // namespace

TEST(Accumulate, ConfigKeyAndItsRefusals) {
  const std::string tail = "[[layer]]\ntype = \"fc\"\nunits = 4\n[[layer]]\ntype = \"softmax_xent\"\n";
  EXPECT_EQ(parse_net_config(tail, "a.toml").train.accumulate, 1);
  EXPECT_EQ(parse_net_config("[train]\naccumulate = 8\n" + tail, "a.toml").train.accumulate, 8);
  EXPECT_EQ(test::config_error("[train]\naccumulate = 0\n" + tail),
            "bad.toml:2: 'accumulate' = 0 is outside [1, 1048576]");
  EXPECT_EQ(test::config_error("[train]\naccumulate = 2.5\n" + tail), "bad.toml:2: 'accumulate' must be an integer");
  EXPECT_EQ(test::config_error("[net]\naccumulate = 2\n" + tail).rfind("bad.toml:2: unknown key 'accumulate'", 0), 0u)
      << test::config_error("[net]\naccumulate = 2\n" + tail);
}

// Batches of 12 as 2, 3, 4 and 6 micro-batches: the loss, top-1 hits and samples summed over the
// steps, the weights and the momentum follow the unaccumulated run to float rounding, far closer
// than training the micro-batches as steps of their own comes.
TEST(Accumulate, MicroBatchesEndWhereTheWholeBatchDoes) {
  const std::vector<HostBatch> data = batches(12, 6, 7);
  const Trained whole = train(config(1), data);
  ASSERT_EQ(whole.sums.samples, 72);
  for (int k : {2, 3, 4, 6}) {
    const Trained acc = train(config(k), data);
    EXPECT_LT(rel_l2(acc.weights, whole.weights), 1e-6) << k;
    EXPECT_LT(rel_l2(acc.m, whole.m), 1e-5) << k;
    EXPECT_NEAR(acc.sums.loss, whole.sums.loss, 1e-7 * whole.sums.loss) << k;
    EXPECT_EQ(acc.sums.correct, whole.sums.correct) << k;
    EXPECT_EQ(acc.sums.samples, whole.sums.samples) << k;
    EXPECT_EQ(acc.nonfinite, -1);
  }
  std::vector<HostBatch> halves;
  for (const HostBatch& b : data) halves.push_back(slice(b, 0, 6)), halves.push_back(slice(b, 6, 6));
  EXPECT_GT(rel_l2(train(config(1), halves).weights, whole.weights), 1e-3);
}

// Batch norm normalises each micro-batch by its own statistics and updates its running statistics
// once for each, as a PyTorch loop that accumulates gradients over micro-batches does: after one
// step of 2 micro-batches they are those of the two forward passes in turn, not the whole batch's.
TEST(Accumulate, BatchNormStatisticsAreEachMicroBatchs) {
  const std::vector<HostBatch> data = batches(12, 1, 8);
  const Trained acc = train(config(2, true), data);
  Net net(config(1, true), kInput, kClasses);
  net.init_weights(5);
  Net micro = net;
  net.forward(12, data[0].x.data(), data[0].labels.data(), true, 900, data[0].keys.data());
  for (int from : {0, 6}) {
    const HostBatch s = slice(data[0], from, 6);
    micro.forward(6, s.x.data(), s.labels.data(), true, 900, s.keys.data());
  }
  ASSERT_FALSE(micro.state().empty());
  EXPECT_EQ(acc.state, micro.state());
  EXPECT_GT(rel_l2(acc.state, net.state()), 1e-3);
}

// A NaN in the last micro-batch's samples, or in the first's: either way the step is skipped (no
// update, the running statistics kept with --skip-nonfinite, its figures left out) and the gradients
// summed before it are dropped, so that both runs, and one that never saw the step, end alike.
TEST(Accumulate, ANonFiniteMicroBatchSkipsTheWholeStep) {
  const std::vector<HostBatch> data = batches(12, 3, 9);
  for (bool batch_norm : {false, true}) {
    const NetConfig cfg = plain_config(3, batch_norm);
    std::vector<HostBatch> last = data, first = data, without = {data[0], data[2]};
    poison(last[1], 10);
    poison(first[1], 1);
    const Trained a = train(cfg, last, true), b = train(cfg, first, true), c = train(cfg, without, true);
    EXPECT_EQ(a.nonfinite, 1);
    EXPECT_EQ(b.nonfinite, 1);
    EXPECT_EQ(a.sums.skipped, 1);
    EXPECT_EQ(a.sums.samples, 24);
    EXPECT_EQ(a.weights, c.weights) << "batch norm " << batch_norm;
    EXPECT_EQ(b.weights, c.weights) << "batch norm " << batch_norm;
    EXPECT_EQ(a.state, c.state) << "batch norm " << batch_norm;
    EXPECT_EQ(b.m, c.m) << "batch norm " << batch_norm;
  }
}

// Through the binary, batch 12 for 20 steps: on 1 rank as 3 micro-batches of 4, on 2 ranks as 2 of
// 3 and as 6 of 1, each ends where the same ranks without accumulation do (the ranks' epoch plan
// is the same), with the same steps counted; a run with another seed ends far away.
TEST(Accumulate, RanksAndMicroBatchesAgreeWithoutAccumulation) {
  make_dirs(kTmp);
  ASSERT_TRUE(file_exists(kTrain)) << kTrain;
  SyntheticSpec spec;
  spec.file_counts.assign(144, 2);
  spec.classes = 4;
  write_synthetic_dataset(kTmp + "/data", spec);
  auto trained = [&](int ranks, int k, int seed) {
    const std::string name = kTmp + "/r" + std::to_string(ranks) + "k" + std::to_string(k) + "s" + std::to_string(seed);
    write_file_atomic(name + ".toml", config(k).text);
    std::remove((name + ".ckpt").c_str());
    const std::string launcher = ranks > 1 ? "mpirun -np " + std::to_string(ranks) + " " : "";
    EXPECT_EQ(run(launcher + kTrain + " --config " + name + ".toml --data " + kTmp +
                  "/data --batch 12 --epochs 1 --shuffle-files 1 --threads 1 --log-every 0 --stop-after 20 --seed " +
                  std::to_string(seed) + " --checkpoint " + name + ".ckpt"),
              0)
        << name;
    return read_checkpoint(name + ".ckpt");
  };
  for (const auto& [ranks, ks] : {std::pair<int, std::vector<int>>{1, {3}}, {2, {2, 6}}}) {
    const Checkpoint plain = trained(ranks, 1, 3);
    for (int k : ks) {
      const Checkpoint c = trained(ranks, k, 3);
      EXPECT_EQ(c.info.at("global_step").get<long long>(), 20) << ranks << " ranks, " << k;
      EXPECT_LT(max_diff(plain.weights, c.weights), 2e-5) << ranks << " ranks, " << k;
      EXPECT_LT(max_diff(plain.m, c.m), 2e-5) << ranks << " ranks, " << k;
    }
    if (ranks == 1) EXPECT_GT(max_diff(plain.weights, trained(1, 3, 4).weights), 1e-2);
  }
}

// A run of 3 micro-batches a step stopped after step 4 of 10 (checkpoints fall between optimiser
// steps, with no gradient sum to carry) and resumed repeats the uninterrupted run bit for bit, into
// the next epoch; resumed on 2 ranks (3 micro-batches of 2 each) to the epoch's end it follows it to
// float rounding; on 3 ranks, whose 3 x 3 micro-batches do not divide the batch of 12, it is refused
// naming the key.
TEST(Accumulate, ResumeContinuesTheRun) {
  make_dirs(kTmp);
  ASSERT_TRUE(file_exists(kTrain)) << kTrain;
  SyntheticSpec spec;
  spec.file_counts.assign(60, 2);
  spec.classes = 4;
  write_synthetic_dataset(kTmp + "/resume", spec);
  const std::string cfg = kTmp + "/k3.toml";
  write_file_atomic(cfg, config(3).text);
  const std::string common = " --threads 1 --log-every 0";
  const std::string fresh = kTrain + " --config " + cfg + " --data " + kTmp + "/resume --batch 12 --epochs 2 --seed 6" +
                            common;
  const std::string whole = kTmp + "/whole.ckpt", ten = kTmp + "/ten.ckpt", part = kTmp + "/part.ckpt",
                    ranks = kTmp + "/ranks.ckpt";
  for (const std::string& p : {whole, ten, part, ranks}) std::remove(p.c_str());
  ASSERT_EQ(run(fresh + " --stop-after 14 --checkpoint " + whole), 0);
  ASSERT_EQ(run(fresh + " --stop-after 10 --checkpoint " + ten), 0);
  ASSERT_EQ(run(fresh + " --stop-after 4 --checkpoint " + part), 0);
  ASSERT_EQ(run("cp " + part + " " + ranks), 0);
  ASSERT_EQ(run(kTrain + " --resume " + part + " --stop-after 14" + common), 0);
  const Checkpoint a = read_checkpoint(whole), b = read_checkpoint(part);
  EXPECT_EQ(b.info.at("global_step").get<long long>(), 14);
  EXPECT_EQ(a.weights, b.weights);
  EXPECT_EQ(a.m, b.m);
  // The rest of the first epoch on 2 ranks trains the 1-rank plan's batches (the next would not).
  ASSERT_EQ(run("mpirun -np 2 " + kTrain + " --resume " + ranks + " --stop-after 10" + common), 0);
  EXPECT_LT(max_diff(read_checkpoint(ten).weights, read_checkpoint(ranks).weights), 2e-5);
  // 12 over 3 ranks x 3 micro-batches does not split: refused before any step, naming the key.
  const std::string err = kTmp + "/refused.txt";
  EXPECT_NE(run("mpirun -np 3 " + kTrain + " --resume " + ranks + " --stop-after 20" + common + " 2> " + err), 0);
  const std::string said = read_whole_file(err);
  EXPECT_NE(said.find("--batch 12 does not split over 3 ranks x 3 micro-batches ([train] accumulate = 3 in "),
            std::string::npos)
      << said;
  EXPECT_EQ(read_checkpoint(ranks).info.at("global_step").get<long long>(), 10) << "the checkpoint was changed";
}
