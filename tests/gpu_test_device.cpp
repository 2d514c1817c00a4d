// The GPU is visible to the CUDA build and reports a name.
#include <gtest/gtest.h>

#include "train/gpu_info.h"

TEST(GpuDevice, CountAndName) {
  ASSERT_GT(convoy::gpu_count(), 0);
  EXPECT_FALSE(convoy::gpu_name(0).empty());
}
