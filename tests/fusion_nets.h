// Small nets for the fusion plan's test, each built to meet some of the plan's rules (and, with
// 4 channels, to miss those that want whole 16-byte packs of bf16 channels): residual blocks with
// identity and downsampling shortcuts, a ReLU read by several layers, an add of two batch norms.
#pragma once
#include <string>
#include <vector>

#include "train/net_node.h"

namespace convoy::test {

struct FusionNet {
  std::string name;
  Dims input;
  std::string toml;
};

inline std::string layer(const std::string& name, const std::string& type, const std::string& keys = "",
                         const std::string& inputs = "") {
  std::string t = "[[layer]]\nname = \"" + name + "\"\ntype = \"" + type + "\"\n" + keys;
  if (!inputs.empty()) t += "inputs = [" + inputs + "]\n";
  return t;
}

inline std::string conv(const std::string& name, int filters, int kernel, int stride, const std::string& inputs = "") {
  return layer(name, "conv",
               "filters = " + std::to_string(filters) + "\nkernel = " + std::to_string(kernel) + "\nstride = " +
                   std::to_string(stride) + "\npad = " + std::to_string(kernel / 2) + "\nbias = false\n",
               inputs);
}

// A ResNet in small: a stem (conv, batch norm, ReLU, max pooling), a block with an identity
// shortcut, a block with a downsampling one, and the head; c channels throughout.
inline std::string small_resnet(int c) {
  std::string t = conv("stem", c, 3, 2) + layer("stem.bn", "batch_norm") + layer("stem.relu", "relu") +
                  layer("pool", "max_pool", "kernel = 3\nstride = 2\npad = 1\n");
  t += conv("a.conv1", c, 3, 1, "\"pool\"") + layer("a.bn1", "batch_norm") + layer("a.relu1", "relu") +
       conv("a.conv2", c, 3, 1) + layer("a.bn2", "batch_norm") + layer("a.add", "add", "", "\"a.bn2\", \"pool\"") +
       layer("a.relu2", "relu");
  t += conv("b.conv1", 2 * c, 3, 2, "\"a.relu2\"") + layer("b.bn1", "batch_norm") + layer("b.relu1", "relu") +
       conv("b.conv2", 2 * c, 3, 1) + layer("b.bn2", "batch_norm") + conv("b.down", 2 * c, 1, 2, "\"a.relu2\"") +
       layer("b.down.bn", "batch_norm") + layer("b.add", "add", "", "\"b.bn2\", \"b.down.bn\"") +
       layer("b.relu2", "relu");
  return t + layer("gap", "global_avg_pool") + layer("flat", "flatten") + layer("fc", "fc", "units = 10\n") +
         layer("loss", "softmax_xent");
}

// A batch norm's ReLU read by a convolution and a residual add (pre-activation), an add of two
// batch norms, a ReLU read by two convolutions, and dropout and GELU on the way.
inline std::string branches(int c) {
  std::string t = conv("stem", c, 3, 1) + layer("stem.bn", "batch_norm") + layer("stem.relu", "relu");
  t += conv("p.conv", c, 3, 1, "\"stem.relu\"") + layer("p.add", "add", "", "\"p.conv\", \"stem.relu\"");
  t += conv("q.conv1", c, 3, 1, "\"p.add\"") + layer("q.bn1", "batch_norm") + conv("q.conv2", c, 1, 1, "\"p.add\"") +
       layer("q.bn2", "batch_norm") + layer("q.add", "add", "", "\"q.bn1\", \"q.bn2\"") + layer("q.relu", "relu");
  t += conv("r.conv1", c, 3, 1, "\"q.relu\"") + conv("r.conv2", c, 3, 1, "\"q.relu\"") +
       layer("r.add", "add", "", "\"r.conv1\", \"r.conv2\"") + layer("r.gelu", "gelu") +
       layer("r.drop", "dropout", "p = 0.25\n");
  return t + layer("flat", "flatten") + layer("fc", "fc", "units = 10\n") + layer("loss", "softmax_xent");
}

inline std::vector<FusionNet> fusion_nets() {
  return {{"small_resnet16", {3, 32, 32}, small_resnet(16)},
          {"small_resnet4", {3, 32, 32}, small_resnet(4)},
          {"branches16", {3, 8, 8}, branches(16)},
          {"branches4", {3, 8, 8}, branches(4)}};
}

}  // namespace convoy::test
