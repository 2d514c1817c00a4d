// What the data-parallel tests share: a small net with dropout and augmentation, and running the
// real train binary (under mpirun) from a test.
#pragma once
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "source_dir.h"

namespace convoy::test {

// The train binary: CONVOY_TRAIN, else one beside the test binary or a folder above it (a packed
// bin/; <build>/train for <build>/tests), else <build>/train as compiled in (CONVOY_TEST_TMP is
// <build>/tests/tmp).
inline const std::string kTrain = find_tool("train", std::getenv("CONVOY_TRAIN"), self_exe(),
                                            std::string(CONVOY_TEST_TMP) + "/../../train");

inline const char* kConfig = R"(
[train]
lr = 0.05
schedule = "onecycle"
[data]
pad = 1
crop = 8
flip = true
[[layer]]
type = "conv"
filters = 6
kernel = 3
pad = 1
[[layer]]
type = "relu"
[[layer]]
type = "max_pool"
kernel = 2
[[layer]]
type = "flatten"
[[layer]]
type = "fc"
units = 16
[[layer]]
type = "relu"
[[layer]]
type = "dropout"
p = 0.25
[[layer]]
type = "fc"
units = "classes"
[[layer]]
type = "softmax_xent"
)";

inline int run(const std::string& cmd) {
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 1);
  setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 1);
  const int rc = std::system(("timeout 300 " + cmd).c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

inline double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, double(std::fabs(a[i] - b[i])));
  return d;
}

}  // namespace convoy::test
