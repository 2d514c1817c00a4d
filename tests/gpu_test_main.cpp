// main() of every GPU test binary: exit code 77 (ctest's "skipped") where no GPU is present, so a
// CPU-only machine reports these tests as not run rather than passed.
#include <cstdio>

#include <gtest/gtest.h>

#include "train/gpu_info.h"

int main(int argc, char** argv) {
  if (convoy::gpu_count() == 0) {
    std::printf("no GPU present: skipped\n");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
