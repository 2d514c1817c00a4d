// The gelu op's forward values against PyTorch's exact GELU, and its config; its gradient and its
// CUDA twin are checked with every registered op (Gradcheck.EveryRegisteredOpInANet, gpu_test_net).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "shared/error.h"
#include "train/layers/gelu.h"
#include "train/net.h"
#include "train/net_config.h"

using namespace convoy;

// torch.nn.functional.gelu(torch.tensor(x, dtype=torch.float64)), i.e. 0.5 x (1 + erf(x / sqrt 2)).
TEST(Gelu, ForwardIsTheExactGelu) {
  const std::vector<float> x = {-3.f, -1.f, -0.5f, 0.f, 0.5f, 1.f, 3.f};
  const std::vector<double> want = {-0.00404969409489031, -0.15865525393145707, -0.15426876936299344, 0.0,
                                    0.34573123063700656,  0.8413447460685429,   2.99595030590511};
  std::vector<float> y(x.size());
  gelu_forward(x.size(), x.data(), y.data());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], want[i], 1e-6 + 1e-6 * std::abs(want[i])) << x[i];
}

TEST(Gelu, ConfigTypeAndKeys) {
  const std::string tail =
      "[[layer]]\ntype = \"flatten\"\n[[layer]]\ntype = \"fc\"\nunits = 4\n"
      "[[layer]]\ntype = \"softmax_xent\"\n";
  Net net(parse_net_config("[[layer]]\ntype = \"gelu\"\n" + tail, "gelu.toml"), Dims{2, 3, 3});
  EXPECT_EQ(std::string(net.nodes()[0].op().type()), "gelu");
  EXPECT_EQ(net.nodes()[0].out, (Dims{2, 3, 3}));
  EXPECT_NE(net.summary().find("gelu1"), std::string::npos);
  try {
    parse_net_config("[[layer]]\ntype = \"gelu\"\napproximate = \"tanh\"\n" + tail, "gelu.toml");
    ADD_FAILURE() << "a key gelu does not take was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "gelu.toml:3: unknown key 'approximate' in a gelu layer");
  }
}
