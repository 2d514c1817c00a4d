// Net configs: mistakes are reported as file:line: reason before training; the shipped configs
// build with the expected sizes; each of them trains one step on synthetic data.
#include <gtest/gtest.h>

#include <cmath>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "shared/atomic_file.h"
#include "shared/error.h"
#include "shared/mpi_context.h"
#include "train/layers/registry.h"
#include "train/net.h"
#include "train/net_config.h"
#include "train/synthetic_data.h"
#include "train/trainer.h"

using namespace convoy;

namespace {

std::string error_of(const std::string& text, Dims in = {1, 8, 8}) {
  try {
    NetConfig c = parse_net_config(text, "bad.toml");
    Net net(c, in, 4);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

const std::string kTail =
    "[[layer]]\ntype = \"flatten\"\n[[layer]]\ntype = \"fc\"\nunits = 4\n[[layer]]\ntype = \"softmax_xent\"\n";

convoy::MpiContext& mpi() {
  static convoy::MpiContext ctx(nullptr, nullptr);
  return ctx;
}

std::string repo_file(const std::string& rel) {
  // CONVOY_TEST_TMP is <build>/tests/tmp; the sources are found from this file's path.
  std::string here = __FILE__;
  return here.substr(0, here.rfind("/tests/")) + "/" + rel;
}

// A copy of a shipped config in `dir` with its [data] crop = 224 and [net] input = [3, 224, 224]
// set to `side`, for a net too slow to step on the CPU at 224 px in CI.
std::string with_crop(const std::string& file, int side, const std::string& dir) {
  std::string text = read_whole_file(repo_file(file));
  const std::string s = std::to_string(side);
  for (auto [from, to] : {std::pair<std::string, std::string>{"\ncrop = 224\n", "\ncrop = " + s + "\n"},
                          {"\ninput = [3, 224, 224]\n", "\ninput = [3, " + s + ", " + s + "]\n"}}) {
    const size_t at = text.find(from);
    if (at == std::string::npos) throw std::runtime_error(file + " has no" + from);
    text.replace(at, from.size(), to);
  }
  const std::string path = dir + "/crop" + std::to_string(side) + "_" + file.substr(file.rfind('/') + 1);
  write_file_atomic(path, text);
  return path;
}

}  // namespace

TEST(NetConfig, ErrorsNameFileLineAndReason) {
  EXPECT_EQ(error_of("[[layer]]\ntype = \"conv\"\nfilters = 4\nfilter = 3\n" + kTail),
            "bad.toml:4: unknown key 'filter' in a conv layer");
  EXPECT_EQ(
      error_of("[[layer]]\ntype = \"convolution\"\n" + kTail).rfind("bad.toml:2: unknown layer type 'convolution'", 0),
      0u);
  EXPECT_EQ(error_of("[[layer]]\nname = \"a\"\ntype = \"relu\"\n[[layer]]\ntype = \"add\"\ninputs = [\"a\", \"b\"]\n" +
                     kTail),
            "bad.toml:4: layer 'add2': input 'b' is not an earlier layer (or 'data')");
  EXPECT_EQ(error_of("[[layer]]\nname = \"c\"\ntype = \"conv\"\nfilters = 3\nkernel = 3\n[[layer]]\ntype = "
                     "\"add\"\ninputs = [\"c\", \"data\"]\n" +
                     kTail),
            "bad.toml:6: layer 'add2': inputs have different shapes 3x6x6 and 1x8x8");
  EXPECT_EQ(error_of("[[layer]]\ntype = \"conv\"\nfilters = 4\nkernel = \"3\"\n" + kTail),
            "bad.toml:4: 'kernel' must be an integer");
  EXPECT_EQ(error_of("[[layer]]\ntype = \"conv\"\nfilters = 4\nkernel = 9\n" + kTail),
            "bad.toml:1: layer 'conv1': kernel 9 is larger than the padded input 1x8x8");
  EXPECT_EQ(error_of("[[layer]]\ntype = \"relu\"\n"), "bad.toml:1: the last layer must be softmax_xent (the loss)");
  EXPECT_EQ(error_of("[train]\nlr = -1\n[[layer]]\ntype = \"softmax_xent\"\n").rfind("bad.toml:2: 'lr' = ", 0), 0u);
  EXPECT_EQ(error_of("[train]\noptimizer = \"rmsprop\"\n" + kTail),
            "bad.toml:2: 'optimizer' = \"rmsprop\" is not one of: adam, adamw, lars, sgd");
  // A TOML syntax error carries its line too.
  EXPECT_EQ(error_of("[[layer]]\ntype = \"relu\"\nunits = = 3\n").rfind("bad.toml:3: ", 0), 0u);
  // A layer whose output is never used is a topology mistake.
  EXPECT_EQ(error_of("[[layer]]\nname = \"dead\"\ntype = \"relu\"\n[[layer]]\ntype = \"flatten\"\ninputs = "
                     "\"data\"\n[[layer]]\ntype = \"fc\"\nunits = 4\n[[layer]]\ntype = \"softmax_xent\"\n"),
            "bad.toml:1: layer 'dead': its output is never used (every layer must lead to the loss)");
  EXPECT_EQ(error_of("[[layer]]\ntype = \"conv\"\nfilters = 4\ngroups = 3\n" + kTail)
                .rfind("bad.toml:1: layer 'conv1': groups = 3 must divide", 0),
            0u);
  // A concat joins 2 to 8 inputs of one height and width; ceil_mode is max pooling's alone.
  const std::string conv = "[[layer]]\nname = \"c\"\ntype = \"conv\"\nfilters = 3\nkernel = 3\n";
  EXPECT_EQ(error_of(conv + "[[layer]]\ntype = \"concat\"\n" + kTail),
            "bad.toml:6: layer 'concat2': concat takes 2 to 8 inputs, not 1");
  EXPECT_EQ(error_of(conv +
                     "[[layer]]\ntype = \"concat\"\ninputs = [\"c\", \"c\", \"c\", \"c\", \"c\", \"c\", "
                     "\"c\", \"c\", \"c\"]\n" +
                     kTail),
            "bad.toml:6: layer 'concat2': concat takes 2 to 8 inputs, not 9");
  EXPECT_EQ(error_of(conv + "[[layer]]\ntype = \"concat\"\ninputs = [\"c\", \"data\"]\n" + kTail),
            "bad.toml:6: layer 'concat2': inputs differ in height and width: 3x6x6 ('c') and 1x8x8 ('data')");
  EXPECT_EQ(error_of("[[layer]]\ntype = \"avg_pool\"\nceil_mode = true\n" + kTail),
            "bad.toml:3: unknown key 'ceil_mode' in a avg_pool layer");
  EXPECT_EQ(error_of("[[layer]]\ntype = \"max_pool\"\nceil_mode = 1\n" + kTail),
            "bad.toml:3: 'ceil_mode' must be true or false");
}

// The op table: one op per type, each found by its type, all of them listed when a type is unknown.
TEST(NetConfig, EveryRegisteredOpIsFoundByItsType) {
  std::string known;
  for (const Op* op : registered_ops()) {
    EXPECT_EQ(find_op(op->type()), op) << op->type();
    known += (known.empty() ? "" : ", ") + std::string(op->type());
  }
  EXPECT_EQ(find_op("convolution"), nullptr);
  EXPECT_EQ(error_of("[[layer]]\ntype = \"convolution\"\n" + kTail),
            "bad.toml:2: unknown layer type 'convolution' (known: " + known + ")");
}

// Nets beyond Net's limits, inputs with a side that is not positive and out-of-range numbers are
// refused with one line before any allocation (each once reached the allocator or overflowed; see
// fuzz/corpus/net_config/regress-*).
TEST(NetConfig, NetsBeyondTheLimitsAreRefused) {
  EXPECT_EQ(error_of("[net]\ninput = [1, 1, -1]\n" + kTail),
            "bad.toml:2: 'input' must be [channels, height, width], each 1 to 65536");
  EXPECT_EQ(error_of("[net]\ninput = [1, 8]\n" + kTail),
            "bad.toml:2: 'input' must be [channels, height, width], each 1 to 65536");
  const std::string limits = "(at most 2^31 - 1 values per image and 2^20 along a side)";
  EXPECT_EQ(error_of(kTail, {1, 1, -1}), "bad.toml: cannot build the net for input 1x1x-1 " + limits);
  EXPECT_EQ(error_of(kTail, {3, 65536, 65536}), "bad.toml: cannot build the net for input 3x65536x65536 " + limits);
  EXPECT_EQ(error_of(kTail, {1, 1, 1 << 21}), "bad.toml: cannot build the net for input 1x1x2097152 " + limits);
  EXPECT_EQ(error_of("[[layer]]\ntype = \"conv\"\nfilters = 65536\nkernel = 1\n" + kTail, {1, 1024, 1024}),
            "bad.toml:1: layer 'conv1': output 65536x1024x1024 is beyond the limits " + limits);
  EXPECT_EQ(error_of("[[layer]]\ntype = \"flatten\"\n[[layer]]\ntype = \"fc\"\nunits = 16777216\n"
                     "[[layer]]\ntype = \"softmax_xent\"\n",
                     {1, 1024, 1024}),
            "bad.toml:3: layer 'fc2': the net would have 17592202821632 parameters up to here, more than the limit "
            "of 2147483647");
  // A float where an integer is asked for is refused before toml++ is asked to convert it.
  EXPECT_EQ(error_of("[[layer]]\ntype = \"fc\"\nunits = 4e96\n[[layer]]\ntype = \"softmax_xent\"\n"),
            "bad.toml:3: 'units' must be an integer");
}

TEST(NetConfig, ShippedConfigsHaveTheReferenceSizes) {
  struct Want {
    const char* file;
    size_t params;
    double gflops;  // forward, per image (2 x multiply-adds)
  } wants[] = {{"configs/fmnist.toml", 870634, 0.0383},
               {"configs/alexnet-cc2.toml", 61100840, 1.43},    // torchvision AlexNet: 61.1 M
               {"configs/resnet18.toml", 11689512, 3.64},       // torchvision ResNet-18: 11.69 M
               {"configs/resnet50.toml", 25557032, 8.22},       // torchvision ResNet-50: 25.56 M
               {"configs/googlenet.toml", 6624904, 3.02},       // torchvision GoogLeNet: 6.62 M, 1.50 GMACs
               {"configs/mobilenet_v2.toml", 3504872, 0.621}};  // torchvision MobileNetV2: 3.50 M, 0.30 GMACs
  for (const Want& w : wants) {
    NetConfig c = read_net_config(repo_file(w.file));
    Net net(c, Dims{c.input_c, c.input_h, c.input_w});
    EXPECT_EQ(net.weights().size(), w.params) << w.file;
    EXPECT_NEAR(net.flops_per_image() / 1e9, w.gflops, 0.01 * w.gflops + 0.001) << w.file;
    EXPECT_NE(net.summary().find("total:"), std::string::npos);
  }
}

// Layers with long names keep their whole rows in the profile (--profile) and the summary
// (--print-net): a 127-character name's profile row was cut off at 159 characters, its share lost,
// and the summary row of a concat of eight such names at 255, its parameters and FLOPs lost.
TEST(NetConfig, SummaryRowsAreWholeForLongInputLists) {
  std::string text, names;
  const std::string pad(120, 'x');
  for (int i = 0; i < 8; ++i) {
    const std::string name = "branch" + std::to_string(i) + pad;
    text += "[[layer]]\nname = \"" + name + "\"\ntype = \"conv\"\ninputs = \"data\"\nfilters = 1\nkernel = 1\n";
    names += (i ? "\", \"" : "") + name;
  }
  text += "[[layer]]\nname = \"cat\"\ntype = \"concat\"\ninputs = [\"" + names + "\"]\n" + kTail;
  Net net(parse_net_config(text, "long.toml"), Dims{1, 2, 2}, 4);
  // The whitespace-separated fields of the row that starts with `name`.
  auto row_of = [](const std::string& table, const std::string& name) {
    const size_t at = table.find("\n" + name + " ");
    if (at == std::string::npos) return std::vector<std::string>{};
    std::istringstream row(table.substr(at + 1, table.find('\n', at + 1) - at - 1));
    return std::vector<std::string>{std::istream_iterator<std::string>(row), std::istream_iterator<std::string>()};
  };
  const auto p = row_of(net.profile(), "branch7" + pad);
  EXPECT_EQ(p.size(), 5u) << net.profile();  // name, type, forward and backward seconds, share
  if (p.size() == 5) EXPECT_EQ(p[4], "0.0%");
  const auto f = row_of(net.summary(), "cat");
  EXPECT_EQ(f.size(), 6u) << net.summary();  // name, type, output, inputs, parameters, MFLOPs
  if (f.size() == 6)
    EXPECT_EQ(f[3].substr(f[3].size() - pad.size() - 7) + " " + f[4] + " " + f[5], "branch7" + pad + " 0 0.000");
}

// Each shipped config builds from a dataset and trains one step (a small batch for the 224 px nets;
// ResNet-50 at 32 px, GoogLeNet and MobileNetV2 at 64 px, their crops set to match, to stay within
// seconds on two cores).
TEST(NetConfig, ShippedConfigsTrainOneStep) {
  mpi();
  const std::string tmp = std::string(CONVOY_TEST_TMP) + "/config_one_step";
  struct Case {
    const char* file;
    uint32_t size, channels;
    int classes, batch;
    bool crop_to_size;  // train a copy of the config whose crop is `size`
  } cases[] = {{"configs/fmnist.toml", 28, 1, 10, 8, false},   {"configs/alexnet-cc2.toml", 224, 3, 5, 2, false},
               {"configs/resnet18.toml", 224, 3, 5, 2, false}, {"configs/resnet50.toml", 32, 3, 5, 2, true},
               {"configs/googlenet.toml", 64, 3, 5, 2, true},  {"configs/mobilenet_v2.toml", 64, 3, 5, 2, true}};
  for (const Case& c : cases) {
    SyntheticSpec spec;
    spec.file_counts = {uint32_t(c.batch)};
    spec.shape = {c.size, c.size, c.channels};
    spec.classes = c.classes;
    const std::string data = tmp + "/" + std::to_string(c.size) + "_" + std::to_string(c.channels);
    write_synthetic_dataset(data, spec);
    TrainOptions o;
    o.config = c.crop_to_size ? with_crop(c.file, int(c.size), tmp) : repo_file(c.file);
    o.data = data;
    o.epochs = 1;
    o.batch = c.batch;
    o.log_every = 0;
    o.metrics = tmp + "/one_step.jsonl";
    ASSERT_EQ(run_training(o, 0, 1), 0) << c.file;
    // The file's last line: the epoch record, after the comm_plan record written at the start.
    const std::string records = read_whole_file(o.metrics);
    const nlohmann::json epoch = nlohmann::json::parse(records.substr(records.rfind('\n', records.size() - 2) + 1));
    EXPECT_EQ(epoch.at("kind"), "epoch") << c.file;
    EXPECT_EQ(epoch.at("global_step").get<long long>(), 1) << c.file;
    EXPECT_TRUE(std::isfinite(epoch.at("train_loss").get<double>())) << c.file;
    EXPECT_GT(epoch.at("train_loss").get<double>(), 0.0) << c.file;
  }
}

// A config that declares [net] input is refused on data whose samples (after the crop) have another
// shape, naming the config and the data; the crop that makes them agree is accepted.
TEST(NetConfig, DeclaredInputMustMatchTheData) {
  mpi();
  const std::string tmp = std::string(CONVOY_TEST_TMP) + "/config_input";
  SyntheticSpec spec;
  spec.file_counts = {8};
  spec.shape = {10, 10, 1};
  const std::string data = tmp + "/data";
  write_synthetic_dataset(data, spec);
  const std::string tail =
      "[[layer]]\ntype = \"flatten\"\n[[layer]]\ntype = \"fc\"\nunits = \"classes\"\n"
      "[[layer]]\ntype = \"softmax_xent\"\n";
  TrainOptions o;
  o.data = data;
  o.epochs = 1;
  o.batch = 4;
  o.log_every = 0;
  struct Case {
    const char* name;
    std::string text;
    bool refused;
  } cases[] = {{"rgb.toml", "[net]\ninput = [3, 10, 10]\n" + tail, true},
               {"side.toml", "[net]\ninput = [1, 28, 28]\n" + tail, true},
               {"uncropped.toml", "[net]\ninput = [1, 8, 8]\n" + tail, true},
               {"cropped.toml", "[net]\ninput = [1, 8, 8]\n[data]\ncrop = 8\n" + tail, false},
               {"same.toml", "[net]\ninput = [1, 10, 10]\n" + tail, false},
               {"undeclared.toml", tail, false}};
  for (const Case& c : cases) {
    o.config = tmp + "/" + c.name;
    write_file_atomic(o.config, c.text);
    if (!c.refused) {
      EXPECT_EQ(run_training(o, 0, 1), 0) << c.name;
      continue;
    }
    try {
      run_training(o, 0, 1);
      ADD_FAILURE() << c.name << " was trained on data of another shape";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind(o.config + ": [net] input = [", 0), 0u) << what;
      EXPECT_NE(what.find(data + "'s samples are 1x10x10"), std::string::npos) << what;
    }
  }
}
