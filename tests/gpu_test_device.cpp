// The GPU is visible to the CUDA build and reports a name, and the driver and libraries it runs with
// report their versions (train's start-up line and the metrics' setup record carry them).
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "train/gpu_info.h"

TEST(GpuDevice, CountAndName) {
  ASSERT_GT(convoy::gpu_count(), 0);
  EXPECT_FALSE(convoy::gpu_name(0).empty());
}

TEST(GpuDevice, LibraryVersions) {
  const std::string s = convoy::gpu_libraries();
  EXPECT_TRUE(std::regex_search(s, std::regex(R"(^driver \d+\.\d+, runtime \d+\.\d+, cuDNN \d+\.\d+\.\d+, )"
                                              R"(cuBLAS \d+\.\d+\.\d+, NCCL 2\.\d+\.\d+$)")))
      << s;
}
