// The CUDA net's fusion plan (train/fusion_plan.h), built without CUDA: pinned for the shipped
// configs (ResNet-18 and ResNet-50 among them), for small nets that meet or miss each rule, and for
// every registered op's test net, in bf16 and fp32, against tests/data/fusion_plan.txt (first
// written by GpuNet's own planning, before it moved out of GpuNet); and each rule on ResNet-18.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "fusion_nets.h"
#include "fusion_plan_dump.h"
#include "op_nets.h"
#include "shared/error.h"
#include "train/fusion_plan.h"
#include "train/layers/registry.h"
#include "train/net.h"
#include "train/net_config.h"

using namespace convoy;

namespace {

const std::string kSource = CONVOY_SOURCE_DIR;

// "## <net> <bf16|fp32>" sections of the pinned plans, by their heading.
std::map<std::string, std::string> pinned() {
  std::ifstream in(kSource + "/tests/data/fusion_plan.txt");
  std::map<std::string, std::string> out;
  std::string line, heading;
  while (std::getline(in, line)) {
    if (line.rfind("## ", 0) == 0) {
      heading = line;
      out[heading];
      continue;
    }
    out[heading] += line + "\n";
  }
  return out;
}

std::string plan_of(const Net& net, bool bf16) {
  const FusionPlan p = plan_fusions(net.nodes(), bf16);
  return test::plan_text(net, {p.relu_of, p.fused, p.clipped, p.deferred, p.affine_in, p.skip_grad, p.grad_from,
                               p.sums_taken, p.adds, p.split, p.split_reader, size_t(32) * p.part_values * 2});
}

// The first line where two plans differ, or "".
std::string first_difference(const std::string& want, const std::string& got) {
  std::istringstream a(want), b(got);
  std::string la, lb;
  for (int n = 1;; ++n) {
    const bool end_a = !std::getline(a, la), end_b = !std::getline(b, lb);
    if (end_a && end_b) return "";
    if (end_a != end_b || la != lb)
      return "line " + std::to_string(n) + ": pinned '" + (end_a ? "(end)" : la) + "', planned '" +
             (end_b ? "(end)" : lb) + "'";
  }
}

// The net's bf16 and fp32 plans against the pinned ones; "" when both agree.
std::string differs(const std::map<std::string, std::string>& want, const std::string& name, const Net& net) {
  std::string out;
  for (bool bf16 : {true, false}) {
    const std::string heading = "## " + name + (bf16 ? " bf16" : " fp32");
    const auto it = want.find(heading);
    if (it == want.end()) {
      out += heading + ": not pinned\n";
      continue;
    }
    const std::string got = plan_of(net, bf16);
    if (const std::string d = first_difference(it->second, got); !d.empty()) out += heading + ": " + d + "\n";
  }
  return out;
}

Net config_net(const std::string& name) {
  const NetConfig cfg = read_net_config(kSource + "/configs/" + name + ".toml");
  return Net(cfg, Dims{cfg.input_c, cfg.input_h, cfg.input_w}, cfg.classes ? cfg.classes : 10);
}

// Every pinned net, in the pinned file's order: the shipped configs, the small nets, every op's test net.
std::vector<std::pair<std::string, std::unique_ptr<Net>>> pinned_nets() {
  std::vector<std::pair<std::string, std::unique_ptr<Net>>> nets;
  for (const char* name : {"fmnist", "alexnet-cc2", "resnet18", "resnet50", "googlenet", "mobilenet_v2"})
    nets.emplace_back(name, std::make_unique<Net>(config_net(name)));
  for (const test::FusionNet& n : test::fusion_nets())
    nets.emplace_back(n.name, std::make_unique<Net>(parse_net_config(n.toml, n.name), n.input, 10));
  for (const Op* op : registered_ops()) {
    const std::string name = std::string("op_") + op->type();
    nets.emplace_back(name, std::make_unique<Net>(parse_net_config(test::op_net(*op), name), test::kOpNetInput, 3));
  }
  return nets;
}

// CONVOY_FUSION_PLAN_OUT=tests/data/fusion_plan.txt rewrites the pinned plans from today's rules,
// after a change meant to alter them (its diff is then the change's effect on every net).
TEST(FusionPlan, EveryNetPlansAsPinned) {
  const auto nets = pinned_nets();
  if (const char* out = std::getenv("CONVOY_FUSION_PLAN_OUT"); out && *out) {
    std::ofstream f(out);
    for (const auto& [name, net] : nets)
      for (bool bf16 : {true, false}) f << "## " << name << (bf16 ? " bf16" : " fp32") << "\n" << plan_of(*net, bf16);
  }
  const auto want = pinned();
  ASSERT_EQ(want.size(), 2 * nets.size()) << "tests/data/fusion_plan.txt pins other nets";
  for (const auto& [name, net] : nets) EXPECT_EQ(differs(want, name, *net), "") << name;
}

// The rules one by one, as ResNet-18 meets them in bf16 (64 to 512 channels, whole packs).
TEST(FusionPlan, ResNet18MeetsEachRule) {
  const Net net = config_net("resnet18");
  const FusionPlan p = plan_fusions(net.nodes(), true);
  std::map<std::string, int> at;
  for (size_t i = 0; i < net.nodes().size(); ++i) at[net.nodes()[i].spec.name] = int(i);
  // The stem's batch norm runs its ReLU and leaves both outputs to the max pooling.
  EXPECT_EQ(p.relu_of[at["bn1"]], at["relu1"]);
  EXPECT_TRUE(p.fused[at["relu1"]] && p.deferred[at["bn1"]] && p.deferred[at["relu1"]]);
  EXPECT_EQ(p.affine_in[at["pool1"]][0], at["bn1"]);
  const std::vector<std::string> blocks = {"layer1.0", "layer1.1", "layer2.0", "layer2.1",
                                           "layer3.0", "layer3.1", "layer4.0", "layer4.1"};
  for (size_t b = 0; b < blocks.size(); ++b) {
    const std::string& k = blocks[b];
    const bool down = at.count(k + ".down.bn") > 0;
    SCOPED_TRACE(k);
    // Batch norm and the add each run the ReLU after them.
    EXPECT_EQ(p.relu_of[at[k + ".bn1"]], at[k + ".relu1"]);
    EXPECT_EQ(p.relu_of[at[k + ".add"]], at[k + ".relu2"]);
    EXPECT_TRUE(p.fused[at[k + ".relu1"]] && p.fused[at[k + ".relu2"]]);
    // The second batch norm (and the shortcut's) leaves its output to the add, which takes its
    // gradient sums and writes the gradient both inputs share into the shortcut's buffer.
    EXPECT_TRUE(p.deferred[at[k + ".bn2"]] && p.sums_taken[at[k + ".bn2"]]);
    EXPECT_EQ(p.affine_in[at[k + ".add"]][0], at[k + ".bn2"]);
    EXPECT_EQ(p.affine_in[at[k + ".add"]][1], down ? at[k + ".down.bn"] : -1);
    EXPECT_TRUE(p.skip_grad[at[k + ".add"]][0]);
    const int shortcut = down ? at[k + ".down.bn"] : b == 0 ? at["pool1"] : at[blocks[b - 1] + ".relu2"];
    EXPECT_EQ(p.grad_from[at[k + ".bn2"]], shortcut);
    // The block's first convolution keeps its part of the previous block's ReLU gradient apart,
    // for that block's add to sum; the first block's input is the pooling, whose gradient it adds to.
    EXPECT_EQ(p.split[at[k + ".conv1"]][0], b > 0);
    EXPECT_EQ(p.adds[at[k + ".conv1"]][0], b == 0);
    EXPECT_EQ(p.split_reader[at[k + ".add"]], b + 1 < blocks.size());
  }
  // The part buffer holds the largest such ReLU output: layer1's 64 x 56 x 56.
  EXPECT_EQ(p.part_values, size_t(64) * 56 * 56);
  // In fp32 nothing is fused: only the order of the gradient sums applies. Each block's input is
  // read by its first convolution and by the shortcut (the add, or the downsampling convolution),
  // which comes later in the net and so first in backward order: the convolution adds to it.
  const FusionPlan f = plan_fusions(net.nodes(), false);
  int adds = 0;
  for (size_t i = 0; i < net.nodes().size(); ++i) {
    EXPECT_EQ(f.relu_of[i], -1);
    EXPECT_FALSE(f.fused[i] || f.deferred[i] || f.sums_taken[i] || f.split_reader[i] || f.split[i][0]);
    adds += f.adds[i][0] + f.adds[i][1];
  }
  EXPECT_EQ(adds, int(blocks.size()));
  for (const std::string& k : blocks) EXPECT_TRUE(f.adds[at[k + ".conv1"]][0]) << k;
  EXPECT_EQ(f.part_values, 0u);
}

// A ReLU6 after batch norm runs in the batch norm's pass where its channels fill 16-byte packs of
// bf16 (the clip's bits are kept), never with 4 channels; and, unlike a ReLU, it is never left
// deferred to a max pooling, which would apply max(0, .) alone.
TEST(FusionPlan, Relu6RunsInBatchNormOverWholePacksAndIsNeverDeferred) {
  for (const char* act : {"relu", "relu6"})
    for (int filters : {8, 4}) {
      const std::string toml = std::string(R"([net]
name = "bn_act_pool"
input = [3, 8, 8]
[[layer]]
name = "conv"
type = "conv"
filters = )") + std::to_string(filters) +
                               R"(
kernel = 3
pad = 1
[[layer]]
name = "bn"
type = "batch_norm"
[[layer]]
name = "act"
type = ")" + act + R"("
[[layer]]
name = "pool"
type = "max_pool"
kernel = 2
[[layer]]
name = "flat"
type = "flatten"
[[layer]]
name = "fc"
type = "fc"
units = 3
[[layer]]
name = "loss"
type = "softmax_xent"
)";
      const Net net(parse_net_config(toml, "bn_act_pool"), Dims{3, 8, 8}, 3);
      const FusionPlan p = plan_fusions(net.nodes(), true);
      const bool relu6 = std::string(act) == "relu6", fused = !relu6 || filters == 8;
      SCOPED_TRACE(std::string(act) + " over " + std::to_string(filters) + " channels");
      EXPECT_EQ(p.relu_of[1], fused ? 2 : -1);
      EXPECT_EQ(p.fused[2], fused);
      EXPECT_EQ(p.clipped[2], relu6 && fused);
      const bool deferred = !relu6 && filters == 8;  // a ReLU's, as the pooling takes it over whole packs
      EXPECT_EQ(p.deferred[1], deferred);
      EXPECT_EQ(p.affine_in[3][0], deferred ? 1 : -1);
    }
}

}  // namespace
