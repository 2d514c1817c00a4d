// [train] ema and eval_flip on the CPU reference: the moving average against a hand computation
// over a few steps, evaluation and `train eval` with the average, exact resume with it, the config's
// refusals, and the test-time flip against the mean of each image's and its mirror's outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config_error.h"
#include "input/loader_options.h"
#include "shared/atomic_file.h"
#include "shared/crc32c.h"
#include "shared/error.h"
#include "shared/mpi_context.h"
#include "train/checkpoint.h"
#include "train/cpu_step.h"
#include "train/evaluation.h"
#include "train/net_config.h"
#include "train/run_spec.h"
#include "train/synthetic_data.h"
#include "train/trainer.h"
#include "train/weight_average.h"

using namespace convoy;

namespace {

convoy::MpiContext& mpi() {
  static convoy::MpiContext ctx(nullptr, nullptr);
  return ctx;
}

const std::string kTmp = std::string(CONVOY_TEST_TMP) + "/ema";

const std::string kLayers =
    "[[layer]]\ntype = \"conv\"\nfilters = 3\nkernel = 3\npad = 1\n[[layer]]\ntype = \"batch_norm\"\n"
    "[[layer]]\ntype = \"relu\"\n[[layer]]\ntype = \"flatten\"\n[[layer]]\ntype = \"fc\"\nunits = \"classes\"\n"
    "[[layer]]\ntype = \"softmax_xent\"\n";

std::string config_text(const std::string& train_keys) {
  return "[train]\noptimizer = \"sgd\"\nschedule = \"cosine\"\nlr = 0.05\n" + train_keys + "\n" + kLayers;
}

std::string make_data() {
  const std::string dir = kTmp + "/data";
  SyntheticSpec spec;
  spec.file_counts = {10, 10, 10, 10, 10, 10, 10, 10, 10, 7};
  spec.classes = 4;
  write_synthetic_dataset(dir, spec);
  return dir;
}

TrainOptions options(const std::string& config, const std::string& data, const std::string& ckpt) {
  TrainOptions o;
  o.config = config;
  o.data = data;
  o.val = data;
  o.epochs = 3;
  o.batch = 16;
  o.seed = 5;
  o.threads = 2;
  o.window_files = 3;
  o.readers = 2;
  o.log_every = 0;
  o.checkpoint = ckpt;
  return o;
}

TrainOptions fresh(const std::string& config, const std::string& data, const std::string& ckpt) {
  std::remove(ckpt.c_str());
  return options(config, data, ckpt);
}

std::string write_config(const std::string& name, const std::string& train_keys) {
  const std::string path = kTmp + "/" + name + ".toml";
  write_file_atomic(path, config_text(train_keys));
  return path;
}

// The evaluation of a checkpoint's weights (or its average's) over `dir`, as `train eval` does it.
EvalResult evaluate_checkpoint(const std::string& path, const std::string& dir, bool average, bool flip) {
  const Checkpoint c = read_checkpoint(path);
  const NetConfig cfg = config_of(c, path);
  const DataIdentity trained = trained_on(c, path);
  Net net = net_for_data(cfg, trained.shape, trained.classes.size(), trained.dir);
  net.weights() = average ? c.avg_weights : c.weights;
  net.state() = average ? c.avg_state : c.state;
  const auto loader = make_eval_loader(
      loader_options(dir, 16, false, SampleOutput::floats, cfg.augment, DataShare{}, 2, 0), trained);
  CpuForward forward(net);
  return evaluate(forward, *loader, net.classes(), flip);
}

double last_test_loss(const std::string& jsonl) {
  const std::string text = read_whole_file(jsonl);
  return nlohmann::json::parse(text.substr(text.rfind('{'))).at("test_loss").get<double>();
}

}  // namespace

// Three SGD steps with batch norm: after each, avg = d * avg + (1 - d) * w for every weight and
// running statistic, from the starting weights, as computed here in double from the trained net's.
TEST(Ema, AverageFollowsTheHandComputation) {
  const double d = 0.75;
  NetConfig cfg = parse_net_config(config_text("ema = 0.75"), "ema.toml");
  Net net(cfg, Dims{1, 4, 4}, 3);
  net.init_weights(3);
  Optimizer opt(cfg.train, net);
  WeightAverage average(d, net);
  std::vector<double> want_w(net.weights().begin(), net.weights().end());
  std::vector<double> want_s(net.state().begin(), net.state().end());
  CpuStep step(net, opt, 1, false, &average);
  std::mt19937 rng(9);
  std::normal_distribution<float> noise;
  for (int k = 0; k < 3; ++k) {
    HostBatch b;
    b.n = 4;
    for (int i = 0; i < 4 * 16; ++i) b.x.push_back(noise(rng));
    b.labels = {0, 1, 2, k % 3};
    b.keys = {1, 2, 3, 4};
    EpochSums sums;
    step.train(b, 11, 0.1, sums);
    for (size_t i = 0; i < want_w.size(); ++i) want_w[i] = d * want_w[i] + (1 - d) * net.weights()[i];
    for (size_t i = 0; i < want_s.size(); ++i) want_s[i] = d * want_s[i] + (1 - d) * net.state()[i];
  }
  ASSERT_FALSE(want_s.empty());
  size_t moved = 0;
  for (size_t i = 0; i < want_w.size(); ++i) {
    EXPECT_NEAR(average.weights[i], want_w[i], 1e-6 * (1 + std::fabs(want_w[i]))) << "weight " << i;
    moved += average.weights[i] != net.weights()[i];
  }
  for (size_t i = 0; i < want_s.size(); ++i)
    EXPECT_NEAR(average.state[i], want_s[i], 1e-6 * (1 + std::fabs(want_s[i]))) << "statistic " << i;
  EXPECT_GT(moved, want_w.size() / 2) << "the average should lag the trained weights";
  // Swapping twice gives the net its trained weights back.
  const std::vector<float> trained = net.weights(), averaged = average.weights;
  step.swap_average();
  EXPECT_TRUE(net.weights() == averaged && average.weights == trained);
  step.swap_average();
  EXPECT_TRUE(net.weights() == trained);
}

// --val during training and `train eval` of the checkpoint score the average, not the trained weights.
TEST(Ema, EvaluationUsesTheAverage) {
  mpi();
  const std::string data = make_data();
  const std::string config = write_config("eval", "ema = 0.9");
  const std::string ckpt = kTmp + "/eval.ckpt";
  TrainOptions o = fresh(config, data, ckpt);
  o.metrics = kTmp + "/eval.jsonl";
  std::remove(o.metrics.c_str());
  ASSERT_EQ(run_training(o, 0, 1), 0);
  const Checkpoint c = read_checkpoint(ckpt);
  ASSERT_EQ(c.avg_weights.size(), c.weights.size());
  EXPECT_FALSE(c.avg_weights == c.weights);
  const EvalResult avg = evaluate_checkpoint(ckpt, data, true, false);
  const EvalResult trained = evaluate_checkpoint(ckpt, data, false, false);
  EXPECT_NE(avg.loss, trained.loss);
  EXPECT_NEAR(last_test_loss(o.metrics), avg.loss, 1e-12);
  // The average never feeds back into training: without it the same run trains the same weights,
  // and its evaluation scores them.
  TrainOptions plain = fresh(write_config("eval_plain", ""), data, kTmp + "/eval_plain.ckpt");
  plain.metrics = kTmp + "/eval_plain.jsonl";
  std::remove(plain.metrics.c_str());
  ASSERT_EQ(run_training(plain, 0, 1), 0);
  const Checkpoint p = read_checkpoint(plain.checkpoint);
  EXPECT_TRUE(p.weights == c.weights && p.state == c.state) << "the average changed the trained weights";
  EXPECT_NEAR(last_test_loss(plain.metrics), trained.loss, 1e-12);
  EvalOptions e;
  e.checkpoint = ckpt;
  e.data = data;
  e.batch = 16;
  EXPECT_EQ(run_eval(e, 0, 1), 0);
  // A checkpoint whose config asks for an average it does not hold is refused, naming it.
  Checkpoint bare = c;
  bare.avg_weights.clear();
  bare.avg_state.clear();
  write_checkpoint(kTmp + "/bare.ckpt", bare);
  e.checkpoint = kTmp + "/bare.ckpt";
  try {
    run_eval(e, 0, 1);
    ADD_FAILURE() << "a checkpoint without its average was evaluated";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("bare.ckpt"), std::string::npos) << err.what();
  }
}

// Stopped mid-epoch and at an epoch's end, then resumed: the trained weights and the average end
// bit for bit as an uninterrupted run's.
TEST(Ema, ResumedRunEqualsUninterrupted) {
  mpi();
  const std::string data = make_data();
  const std::string config = write_config("resume", "ema = 0.8\neval_flip = true");
  const std::string full = kTmp + "/full.ckpt";
  ASSERT_EQ(run_training(fresh(config, data, full), 0, 1), 0);
  const Checkpoint a = read_checkpoint(full);
  ASSERT_FALSE(a.avg_weights.empty());
  for (long long stop : {8LL, 5LL}) {
    SCOPED_TRACE(stop);
    const std::string part = kTmp + "/part.ckpt";
    TrainOptions first = fresh(config, data, part);
    first.stop_after = stop;
    ASSERT_EQ(run_training(first, 0, 1), 0);
    TrainOptions second = options("", data, part);
    second.resume = part;
    ASSERT_EQ(run_training(second, 0, 1), 0);
    const Checkpoint b = read_checkpoint(part);
    EXPECT_EQ(a.info.at("global_step"), b.info.at("global_step"));
    EXPECT_TRUE(a.weights == b.weights && a.state == b.state) << "trained weights differ";
    EXPECT_TRUE(a.m == b.m) << "optimiser state differs";
    EXPECT_TRUE(a.avg_weights == b.avg_weights && a.avg_state == b.avg_state) << "the average differs";
  }
}

// A checkpoint with an average (version 2): what it holds comes back; a damaged one, one whose six
// sizes do not add up (an average of 2^62 floats) and one of an unknown version are refused.
TEST(Ema, CheckpointWithAnAverage) {
  Checkpoint c;
  c.info = {{"step", 3}};
  c.weights = {1, 2};
  c.state = {3};
  c.m = {4, 5};
  c.avg_weights = {6, 7};
  c.avg_state = {8};
  const std::string path = kTmp + "/v2.ckpt";
  write_checkpoint(path, c);
  const std::string good = read_whole_file(path);
  EXPECT_EQ(good.substr(0, 8), "CVYCKPT2");
  const Checkpoint back = parse_checkpoint(good, "v2.ckpt");
  EXPECT_TRUE(back.weights == c.weights && back.state == c.state && back.m == c.m && back.v.empty());
  EXPECT_TRUE(back.avg_weights == c.avg_weights && back.avg_state == c.avg_state);
  std::string bad = good;
  bad[good.size() / 2] ^= 0x10;
  EXPECT_THROW(parse_checkpoint(bad, "v2.ckpt"), Error);
  const uint64_t sizes[7] = {2, 0, 0, 0, 0, uint64_t(1) << 62, 0};
  for (const char* magic : {"CVYCKPT2", "CVYCKPT3"}) {
    std::string bytes = magic;
    bytes.append(reinterpret_cast<const char*>(sizes), sizeof sizes);
    bytes += "{}";
    const uint32_t crc = crc32c(bytes.data(), bytes.size());
    bytes.append(reinterpret_cast<const char*>(&crc), 4);
    try {
      parse_checkpoint(bytes, "wrap.ckpt");
      ADD_FAILURE() << magic << " with sizes that do not add up was accepted";
    } catch (const Error& e) {
      EXPECT_STREQ(e.what(), magic[7] == '2' ? "wrap.ckpt: checkpoint sizes do not add up to the file size"
                                             : "wrap.ckpt: not a convoy checkpoint (bad magic or too short)");
    }
  }
}

// Without ema a checkpoint keeps version 1 of the format and no average.
TEST(Ema, OffByDefaultAndRefusedOutOfRange) {
  const std::string tail = "[[layer]]\ntype = \"softmax_xent\"\n";
  EXPECT_EQ(test::config_error("[train]\nema = 1\n" + tail),
            "bad.toml:2: 'ema' must be below 1 (0 <= decay < 1; 0: no average)");
  EXPECT_EQ(test::config_error("[train]\nema = -0.5\n" + tail).rfind("bad.toml:2: 'ema' = ", 0), 0u);
  EXPECT_EQ(test::config_error("[train]\neval_flip = 1\n" + tail), "bad.toml:2: 'eval_flip' must be true or false");
  const NetConfig d = parse_net_config(tail, "default.toml");
  EXPECT_EQ(d.train.ema, 0.0);
  EXPECT_FALSE(d.train.eval_flip);
  const NetConfig c = parse_net_config("[train]\nema = 0.999\neval_flip = true\n" + tail, "good.toml");
  EXPECT_EQ(c.train.ema, 0.999);
  EXPECT_TRUE(c.train.eval_flip);

  mpi();
  const std::string data = make_data();
  const std::string ckpt = kTmp + "/plain.ckpt";
  TrainOptions o = fresh(write_config("plain", ""), data, ckpt);
  o.epochs = 1;
  ASSERT_EQ(run_training(o, 0, 1), 0);
  EXPECT_EQ(read_whole_file(ckpt).substr(0, 8), "CVYCKPT1");
  EXPECT_TRUE(read_checkpoint(ckpt).avg_weights.empty());
}

// A float batch's rows are reversed; a raw batch's samples are marked to be mirrored.
TEST(EvalFlip, MirrorsEachRow) {
  HostBatch f;
  f.n = 1;
  f.x = {1, 2, 3, 4, 5, 6};  // [1, 1, 2, 3]
  mirror_batch(f, 3);
  EXPECT_EQ(f.x, (std::vector<float>{3, 2, 1, 6, 5, 4}));
  HostBatch r;
  r.n = 2;
  r.pixels = {1, 2, 3, 4};
  r.flips = {0, 1};
  mirror_batch(r, 2);
  EXPECT_EQ(r.flips, (std::vector<uint8_t>{1, 0}));
  EXPECT_EQ(r.pixels, (std::vector<uint8_t>{1, 2, 3, 4}));
}

// Evaluation with eval_flip against the mean, computed here, of the net's softmax outputs for each
// image and for its mirror image (reversed by hand); the flip changes the figures.
TEST(EvalFlip, ScoresTheMeanOfEachImageAndItsMirror) {
  mpi();
  const std::string data = make_data();
  const std::string ckpt = kTmp + "/flip.ckpt";
  TrainOptions o = fresh(write_config("flip", "eval_flip = true"), data, ckpt);
  o.epochs = 1;
  ASSERT_EQ(run_training(o, 0, 1), 0);
  const EvalResult flipped = evaluate_checkpoint(ckpt, data, false, true);
  const EvalResult plain = evaluate_checkpoint(ckpt, data, false, false);
  EXPECT_NE(flipped.loss, plain.loss);

  const Checkpoint c = read_checkpoint(ckpt);
  const NetConfig cfg = config_of(c, ckpt);
  const DataIdentity trained = trained_on(c, ckpt);
  Net net = net_for_data(cfg, trained.shape, trained.classes.size(), trained.dir);
  net.weights() = c.weights;
  net.state() = c.state;
  const auto loader = make_eval_loader(
      loader_options(data, 16, false, SampleOutput::floats, cfg.augment, DataShare{}, 2, 0), trained);
  const int classes = net.classes(), w = int(trained.shape.width);
  loader->start_epoch(0);
  HostBatch b;
  double loss = 0, top1 = 0, samples = 0;
  while (loader->next(b)) {
    net.forward(b.n, b.x.data(), b.labels.data(), false);
    std::vector<double> p(net.probs(), net.probs() + size_t(b.n) * classes);
    std::vector<double> l(net.losses(), net.losses() + b.n);
    std::vector<float> m = b.x;
    for (size_t row = 0; row < m.size(); row += size_t(w))
      for (int i = 0; i < w / 2; ++i) std::swap(m[row + size_t(i)], m[row + size_t(w - 1 - i)]);
    net.forward(b.n, m.data(), b.labels.data(), false);
    for (int i = 0; i < b.n; ++i) {
      loss += (l[size_t(i)] + net.losses()[i]) / 2;
      int best = 0;
      for (int k = 0; k < classes; ++k) {
        const size_t at = size_t(i) * classes;
        p[at + size_t(k)] = (p[at + size_t(k)] + net.probs()[at + size_t(k)]) / 2;
        if (p[at + size_t(k)] > p[at + size_t(best)]) best = k;
      }
      top1 += best == b.labels[size_t(i)];
    }
    samples += b.n;
  }
  ASSERT_EQ(double(flipped.samples), samples);
  EXPECT_NEAR(flipped.loss, loss / samples, 1e-6);
  EXPECT_NEAR(flipped.top1, top1 / samples, 1e-12);
}
