// [data] progressive on the CPU: the side by epoch against FFCV's formula (numpy's values, ties
// included), the config's refusals, the net reshaped to smaller inputs (as a net built for them
// computes), the loader's crops by epoch, and a training run that trains each epoch at its side and
// resumed mid-ramp repeats the uninterrupted one.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config_error.h"
#include "input/loader.h"
#include "input/loader_options.h"
#include "input/progressive_resize.h"
#include "shared/atomic_file.h"
#include "shared/dataset_meta.h"
#include "shared/error.h"
#include "shared/mpi_context.h"
#include "train/checkpoint.h"
#include "train/cpu_step.h"
#include "train/net.h"
#include "train/net_config.h"
#include "train/run_spec.h"
#include "train/synthetic_data.h"
#include "train/trainer.h"

using namespace convoy;

namespace {

convoy::MpiContext& mpi() {
  static convoy::MpiContext ctx(nullptr, nullptr);
  return ctx;
}

const std::string kTmp = std::string(CONVOY_TEST_TMP) + "/progressive";

// A net that pools globally before its fc layer, so it runs at any input size.
const std::string kPooled =
    "[[layer]]\ntype = \"conv\"\nfilters = 4\nkernel = 3\nstride = 2\npad = 1\n[[layer]]\ntype = \"batch_norm\"\n"
    "[[layer]]\ntype = \"relu\"\n[[layer]]\ntype = \"global_avg_pool\"\n[[layer]]\ntype = \"fc\"\n"
    "units = \"classes\"\n[[layer]]\ntype = \"softmax_xent\"\n";

// Sides 32, 32, 64, 96 in epochs 0 to 3 (epoch 2: 64 exactly, halfway up the ramp).
const std::string kData =
    "[data]\ncrop = 96\nrandom_resized_crop = true\nflip = true\n"
    "progressive = { min_res = 32, max_res = 96, start_ramp = 1, end_ramp = 3 }\n";

ProgressiveResize ramp(int min_res, int max_res, int start_ramp, int end_ramp) {
  return ProgressiveResize{min_res, max_res, start_ramp, end_ramp};
}

std::vector<int> sides(const ProgressiveResize& p, int epochs) {
  std::vector<int> out;
  for (int e = 0; e < epochs; ++e) out.push_back(resolution_at(p, e));
  return out;
}

std::string make_data() {
  const std::string dir = kTmp + "/data";
  SyntheticSpec spec;
  spec.file_counts = {16, 16, 16, 16, 16};
  spec.shape = {96, 96, 1};
  spec.classes = 4;
  write_synthetic_dataset(dir, spec);
  return dir;
}

std::string write_config(const std::string& name, const std::string& text) {
  const std::string path = kTmp + "/" + name + ".toml";
  write_file_atomic(path, text);
  return path;
}

TrainOptions options(const std::string& config, const std::string& data, const std::string& ckpt,
                     const std::string& metrics) {
  TrainOptions o;
  o.config = config;
  o.data = data;
  o.val = data;
  o.epochs = 4;
  o.batch = 16;
  o.seed = 3;
  o.threads = 2;
  o.window_files = 2;
  o.readers = 2;
  o.log_every = 0;
  o.checkpoint = ckpt;
  o.metrics = metrics;
  return o;
}

// The metrics file's epoch records, by epoch (1-based, as the file counts them); a later record of
// an epoch replaces an earlier one.
std::map<int, nlohmann::json> epoch_records(const std::string& jsonl) {
  std::map<int, nlohmann::json> out;
  const std::string text = read_whole_file(jsonl);
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = text.find('\n', at);
    const nlohmann::json j = nlohmann::json::parse(text.substr(at, end - at));
    if (j.at("kind") == "epoch") out[j.at("epoch").get<int>()] = j;
    at = end == std::string::npos ? text.size() : end + 1;
  }
  return out;
}

// How many epoch records the metrics file holds.
int epoch_count(const std::string& jsonl) {
  const std::string text = read_whole_file(jsonl), kind = "\"kind\":\"epoch\"";
  int n = 0;
  for (size_t at = text.find(kind); at != std::string::npos; at = text.find(kind, at + 1)) ++n;
  return n;
}

// The net's losses and gradients for one batch of x at `in`, in training mode.
struct Pass {
  std::vector<float> losses, grads;
};

Pass pass(Net& net, Dims in, const std::vector<float>& x, const std::vector<int32_t>& labels) {
  const int n = int(labels.size());
  EXPECT_EQ(x.size(), size_t(n) * in.size());
  net.forward(n, x.data(), labels.data(), true, 9);
  net.backward();
  return {{net.losses(), net.losses() + n}, net.grads()};
}

}  // namespace

// FFCV's own recipes and ramps whose midpoints fall on halves, against numpy's
// get_resolution (ffcv-imagenet train_imagenet.py: int(np.round(np.interp(...) / 32)) * 32),
// whose values are written here: np.round takes 4.5 to 4 and 6.5 to 6 (halves to even), where
// rounding halves up or away from zero would give 160 and 224.
TEST(Progressive, SideByEpochFollowsFfcv) {
  // rn18_16_epochs.yaml: 160 -> 192 from epoch 11 to 13 of 16.
  EXPECT_EQ(sides(ramp(160, 192, 11, 13), 16),
            (std::vector<int>{160, 160, 160, 160, 160, 160, 160, 160, 160, 160, 160, 160, 192, 192, 192, 192}));
  // rn50_88_epochs.yaml: 160 -> 192 from epoch 65 to 76 of 88; 192 from epoch 71 (5.55 x 32).
  const std::vector<int> rn50 = sides(ramp(160, 192, 65, 76), 88);
  EXPECT_EQ(std::vector<int>(rn50.begin() + 60, rn50.begin() + 80),
            (std::vector<int>{160, 160, 160, 160, 160, 160, 160, 160, 160, 160,
                              160, 192, 192, 192, 192, 192, 192, 192, 192, 192}));
  EXPECT_EQ(sides(ramp(160, 224, 0, 4), 6), (std::vector<int>{160, 192, 192, 192, 224, 224}));
  EXPECT_EQ(sides(ramp(128, 256, 2, 10), 12),
            (std::vector<int>{128, 128, 128, 128, 160, 192, 192, 192, 224, 256, 256, 256}));
  EXPECT_EQ(sides(ramp(32, 96, 1, 3), 5), (std::vector<int>{32, 32, 64, 96, 96}));
  // A ramp that starts and ends at one epoch steps up the epoch after it (epoch <= start_ramp is
  // asked first).
  EXPECT_EQ(sides(ramp(64, 128, 2, 2), 4), (std::vector<int>{64, 64, 64, 128}));
  EXPECT_EQ(resolutions(ramp(160, 256, 0, 9)), (std::vector<int>{160, 192, 224, 256}));
  EXPECT_EQ(resolutions(ramp(192, 192, 0, 9)), (std::vector<int>{192}));
  // The largest side of a run's epochs: at end_ramp, or at the last epoch of a shorter run.
  EXPECT_EQ(largest_epoch(ramp(160, 192, 65, 76), 88), 76);
  EXPECT_EQ(largest_epoch(ramp(160, 192, 65, 76), 70), 69);
  AugmentSpec a;
  a.crop = 224;
  EXPECT_EQ(train_crop(a, 7), 224);
  a.progressive = ramp(160, 192, 11, 13);
  EXPECT_EQ(train_crop(a, 7), 160);
  EXPECT_EQ(train_crop(a, 13), 192);
}

// The keys as an inline table and as a [data.progressive] table; every refusal in one line that
// names the key, at the line of `progressive`.
TEST(Progressive, ConfigKeysAndRefusals) {
  const std::string tail = "[[layer]]\ntype = \"softmax_xent\"\n";
  const NetConfig c = parse_net_config(kData + tail, "good.toml");
  EXPECT_EQ(c.augment.progressive.min_res, 32);
  EXPECT_EQ(c.augment.progressive.max_res, 96);
  EXPECT_EQ(c.augment.progressive.start_ramp, 1);
  EXPECT_EQ(c.augment.progressive.end_ramp, 3);
  const NetConfig t = parse_net_config(
      "[data]\ncrop = 256\nrandom_resized_crop = true\n[data.progressive]\nmin_res = 160\nmax_res = 192\n"
      "start_ramp = 65\nend_ramp = 76\n" +
          tail,
      "table.toml");
  EXPECT_EQ(t.augment.progressive.max_res, 192);
  EXPECT_EQ(t.augment.progressive.start_ramp, 65);
  EXPECT_FALSE(parse_net_config(tail, "off.toml").augment.progressive.on());

  const auto with = [&](const std::string& table, const std::string& more = "random_resized_crop = true\n") {
    return test::config_error("[data]\ncrop = 64\n" + more + "progressive = " + table + "\n" + tail);
  };
  EXPECT_EQ(with("{ min_res = 64, max_res = 32, start_ramp = 0, end_ramp = 2 }"),
            "bad.toml:4: [data] progressive: min_res 64 is above max_res 32");
  EXPECT_EQ(with("{ min_res = 32, max_res = 96, start_ramp = 0, end_ramp = 2 }"),
            "bad.toml:4: [data] progressive: max_res 96 is above crop 64 (the net's input, at which it evaluates)");
  EXPECT_EQ(with("{ min_res = 40, max_res = 64, start_ramp = 0, end_ramp = 2 }"),
            "bad.toml:4: [data] progressive: min_res 40 must be a positive multiple of 32 (the ramp's sizes are, as "
            "FFCV's)");
  EXPECT_EQ(with("{ min_res = 32, max_res = 64, start_ramp = 5, end_ramp = 2 }"),
            "bad.toml:4: [data] progressive: start_ramp 5 and end_ramp 2 must be epochs with 0 <= start_ramp <= "
            "end_ramp <= 100000");
  EXPECT_EQ(with("{ min_res = 32, max_res = 64, start_ramp = 0, end_ramp = 2 }", ""),
            "bad.toml:3: [data] progressive needs random_resized_crop = true (each epoch's crops are resized to its "
            "side)");
  EXPECT_EQ(with("{ min_res = 32, max_res = 64, end_ramp = 2 }"),
            "bad.toml:4: 'progressive' needs start_ramp (it takes min_res, max_res, start_ramp and end_ramp)");
  EXPECT_EQ(with("{ min_res = 32, max_res = 64, start_ramp = 0, end_ramp = 2, step = 16 }"),
            "bad.toml:4: unknown key 'step' in [data] progressive");
  EXPECT_EQ(with("{ min_res = 32.5, max_res = 64, start_ramp = 0, end_ramp = 2 }"),
            "bad.toml:4: 'min_res' must be an integer");
  EXPECT_EQ(with("{ min_res = 32, max_res = 64, start_ramp = -1, end_ramp = 2 }"),
            "bad.toml:4: 'start_ramp' = -1 is outside [0, 100000]");
  EXPECT_EQ(with("160"), "bad.toml:4: 'progressive' must be a table { min_res, max_res, start_ramp, end_ramp }");
  // The loader's own check (the Python module's and bench-loader's options) gives the same line.
  AugmentSpec a;
  a.crop = 64;
  a.random_resized_crop = true;
  a.progressive = ramp(64, 32, 0, 2);
  EXPECT_EQ(augment_problem(a), "progressive: min_res 64 is above max_res 32");
}

// Reshaped to a smaller input, the net computes what a net built for it computes, bit for bit
// (losses and gradients), keeping its buffers; back at the input it was built for, it computes
// what it did. A larger input, or other channels, are refused.
TEST(Progressive, NetRunsAtSmallerInputsAsOneBuiltForThem) {
  const NetConfig cfg = parse_net_config(kPooled, "pooled.toml");
  Net big(cfg, Dims{1, 64, 64}, 4), small(cfg, Dims{1, 32, 32}, 4);
  big.init_weights(5);
  small.weights() = big.weights();
  std::mt19937 rng(2);
  std::normal_distribution<float> noise;
  std::vector<float> x32(4 * 32 * 32), x64(4 * 64 * 64);
  for (float& v : x32) v = noise(rng);
  for (float& v : x64) v = noise(rng);
  const std::vector<int32_t> labels{0, 1, 2, 3};
  const Pass at64 = pass(big, Dims{1, 64, 64}, x64, labels);
  const float* before = big.nodes()[0].y.data();
  big.set_input(Dims{1, 32, 32});
  EXPECT_EQ(big.input_dims(), (Dims{1, 32, 32}));
  EXPECT_EQ(big.built_input(), (Dims{1, 64, 64}));
  EXPECT_EQ(big.nodes()[0].out, (Dims{4, 16, 16}));
  const Pass reshaped = pass(big, Dims{1, 32, 32}, x32, labels);
  const Pass built = pass(small, Dims{1, 32, 32}, x32, labels);
  EXPECT_EQ(reshaped.losses, built.losses);
  EXPECT_EQ(reshaped.grads, built.grads);
  EXPECT_EQ(big.nodes()[0].y.data(), before) << "the buffers were made again";
  big.set_input(Dims{1, 64, 64});
  const Pass again = pass(big, Dims{1, 64, 64}, x64, labels);
  EXPECT_EQ(again.losses, at64.losses);
  EXPECT_EQ(again.grads, at64.grads);
  EXPECT_THROW(big.set_input(Dims{1, 96, 96}), Error);
  EXPECT_THROW(big.set_input(Dims{3, 32, 32}), Error);
  EXPECT_THROW(big.nodes_at(Dims{1, 64, 65}), Error);
}

// A net whose parameters depend on the input's size (an fc layer after a flatten) or that cannot
// run at one of the sides (a pool's kernel larger than its input there) is refused when it is
// built for its data, in one line naming the layer and the side.
TEST(Progressive, NetsThatCannotRunAtEverySideAreRefused) {
  const std::string flat =
      kData +
      "[[layer]]\ntype = \"conv\"\nfilters = 2\nkernel = 3\nstride = 2\npad = 1\n[[layer]]\ntype = \"flatten\"\n"
      "[[layer]]\nname = \"head\"\ntype = \"fc\"\nunits = \"classes\"\n[[layer]]\ntype = \"softmax_xent\"\n";
  const ImageShape stored{96, 96, 1};
  try {
    net_for_data(parse_net_config(flat, "flat.toml"), stored, 4, "data");
    ADD_FAILURE() << "a net with an fc layer after a flatten was built for progressive resizing";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "flat.toml:14: layer 'head': its parameters depend on the input's size (2052 at input 1x32x32, "
                 "18436 at 1x96x96 as built): the net runs at one size only (a global pool before the fc layers "
                 "makes it run at any) ([data] progressive trains at 32x32)");
  }
  const std::string pooled_big =
      kData +
      "[[layer]]\ntype = \"conv\"\nfilters = 2\nkernel = 3\nstride = 2\npad = 1\n[[layer]]\nname = \"pool\"\n"
      "type = \"avg_pool\"\nkernel = 24\nstride = 24\n[[layer]]\ntype = \"global_avg_pool\"\n[[layer]]\n"
      "type = \"fc\"\nunits = \"classes\"\n[[layer]]\ntype = \"softmax_xent\"\n";
  try {
    net_for_data(parse_net_config(pooled_big, "pool.toml"), stored, 4, "data");
    ADD_FAILURE() << "a pool larger than the smallest side's input was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "pool.toml:12: layer 'pool': kernel 24 is larger than the padded input 2x16x16 ([data] progressive "
                 "trains at 32x32)");
  }
  // Without [data] progressive the same net is fine.
  const std::string fixed = "[data]\ncrop = 96\n" + flat.substr(kData.size());
  EXPECT_NO_THROW(net_for_data(parse_net_config(fixed, "fixed.toml"), stored, 4, "data"));
}

// The training loader's batches are of each epoch's side (floats and raw pixels alike), and say
// so; evaluation's stay at crop; the raw format is the largest.
TEST(Progressive, LoaderCropsEachEpochAtItsSide) {
  const std::string data = make_data();
  const NetConfig cfg = parse_net_config(kData + kPooled, "loader.toml");
  const DatasetMeta meta = read_dataset_meta(data);
  for (SampleOutput out : {SampleOutput::floats, SampleOutput::raw}) {
    Loader train(loader_options(data, 8, true, out, cfg.augment, DataShare{0, 1, 3}, 2, 0), meta);
    EXPECT_EQ(train.sample_format().height, 96);
    const size_t bound = train.memory_bound();
    for (int epoch : {0, 1, 2, 3, 2}) {
      SCOPED_TRACE(epoch);
      const int side = resolution_at(cfg.augment.progressive, epoch);
      train.start_epoch(epoch);
      HostBatch b;
      long long batches = 0;
      while (train.next(b)) {
        ++batches;
        ASSERT_EQ(b.height, side);
        ASSERT_EQ(b.width, side);
        const size_t values = size_t(b.n) * side * side;
        ASSERT_EQ(out == SampleOutput::floats ? b.x.size() : b.pixels.size(), values);
      }
      EXPECT_EQ(batches, train.batches_per_epoch());
      EXPECT_EQ(train.memory_bound(), bound) << "the bound is the largest side's";
    }
  }
  Loader eval(loader_options(data, 8, false, SampleOutput::floats, cfg.augment, DataShare{}, 2, 0), meta);
  eval.start_epoch(0);
  HostBatch b;
  ASSERT_TRUE(eval.next(b));
  EXPECT_EQ(b.height, 96);
  EXPECT_EQ(b.x.size(), size_t(b.n) * 96 * 96);
}

// A run trains each epoch at its side (the metrics' train_side, from the batches it trained) and
// evaluates at crop; stopped mid-ramp (in the epoch of side 64) or at an epoch's end and resumed, it
// ends bit for bit where the uninterrupted run does, each epoch's loss the same: the side is a
// function of the epoch, and nothing of it is saved.
TEST(Progressive, TrainsEachEpochAtItsSideAndResumesMidRamp) {
  mpi();
  const std::string data = make_data();
  const std::string config = write_config("run", "[train]\noptimizer = \"sgd\"\nschedule = \"cosine\"\nlr = 0.05\n" +
                                                     kData + kPooled);
  const std::string full = kTmp + "/full.ckpt", full_metrics = kTmp + "/full.jsonl";
  std::remove(full.c_str());
  std::remove(full_metrics.c_str());
  ASSERT_EQ(run_training(options(config, data, full, full_metrics), 0, 1), 0);
  const std::map<int, nlohmann::json> want = epoch_records(full_metrics);
  ASSERT_EQ(want.size(), 4u);
  const std::vector<int> expected{32, 32, 64, 96};
  for (int e = 1; e <= 4; ++e) {
    EXPECT_EQ(want.at(e).at("train_side").get<int>(), expected[size_t(e - 1)]) << "epoch " << e;
    EXPECT_TRUE(want.at(e).contains("test_loss"));
  }
  const Checkpoint a = read_checkpoint(full);
  // 80 samples, batches of 16: 5 steps an epoch; step 12 is mid-epoch 3 (side 64), 10 its start.
  for (long long stop : {12LL, 10LL}) {
    SCOPED_TRACE(stop);
    const std::string part = kTmp + "/part.ckpt", part_metrics = kTmp + "/part.jsonl";
    std::remove(part.c_str());
    std::remove(part_metrics.c_str());
    TrainOptions first = options(config, data, part, part_metrics);
    first.stop_after = stop;
    ASSERT_EQ(run_training(first, 0, 1), 0);
    TrainOptions second = options("", data, part, part_metrics);
    second.resume = part;
    ASSERT_EQ(run_training(second, 0, 1), 0);
    const Checkpoint b = read_checkpoint(part);
    EXPECT_EQ(a.info.at("global_step"), b.info.at("global_step"));
    EXPECT_TRUE(a.weights == b.weights && a.state == b.state) << "trained weights differ";
    EXPECT_TRUE(a.m == b.m) << "optimiser state differs";
    // A run stopped at an epoch's last step (10) makes that epoch's end (its evaluation and record)
    // before it stops: the two runs' records are the uninterrupted run's, each epoch's once.
    const std::map<int, nlohmann::json> got = epoch_records(part_metrics);
    ASSERT_EQ(got.size(), 4u);
    EXPECT_EQ(epoch_count(part_metrics), 4) << "an epoch recorded twice";
    for (const auto& [e, record] : got) {
      EXPECT_EQ(record.at("train_side"), want.at(e).at("train_side")) << "epoch " << e;
      EXPECT_DOUBLE_EQ(record.at("train_loss").get<double>(), want.at(e).at("train_loss").get<double>())
          << "epoch " << e;
      EXPECT_DOUBLE_EQ(record.at("test_loss").get<double>(), want.at(e).at("test_loss").get<double>()) << "epoch " << e;
    }
  }
}
