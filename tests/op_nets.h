// The small net the op tests build each registered op into, from the op's own example keys: a
// 4-channel 6x6 convolution in front, so the op's backward pass shows in a gradient, then flatten,
// an fc and the loss (or the op itself as the loss). Every registered op is tested by registering.
#pragma once
#include <string>

#include "train/layers/op.h"
#include "train/net_node.h"

namespace convoy::test {

constexpr Dims kOpNetInput{3, 6, 6};

// With `flat`, the op gets the convolution's output flattened (4 x 6 x 6 values as 144 x 1 x 1).
inline std::string op_net(const Op& op, bool flat = false) {
  auto layer = [](const std::string& name, const std::string& type, const std::string& keys) {
    return "[[layer]]\nname = \"" + name + "\"\ntype = \"" + type + "\"\n" + keys;
  };
  std::string t = layer("pre", "conv", "filters = 4\nkernel = 3\npad = 1\n");
  if (op.is_loss())
    return t + layer("flat", "flatten", "") + layer("fc", "fc", "units = 3\n") + layer("op", op.type(), op.example());
  const std::string in = flat ? "flat_in" : "pre";
  if (flat) t += layer(in, "flatten", "");
  t += layer("op", op.type(), op.example() + (op.arity() == 2 ? "inputs = [\"" + in + "\", \"" + in + "\"]\n" : ""));
  return t + layer("flat", "flatten", "") + layer("fc", "fc", "units = 3\n") + layer("loss", "softmax_xent", "");
}

}  // namespace convoy::test
