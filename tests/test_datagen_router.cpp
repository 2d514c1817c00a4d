// ResizeRouter, --gpu-resize's per-image choice: it measures the CPU first, then the GPU, sends
// each image to the cheaper path for its size, and keeps probing the path it does not use.
#include <gtest/gtest.h>

#include "datagen/resize_router.h"

namespace convoy::datagen {
namespace {

constexpr double kPixels = 600.0 * 450.0;

TEST(ResizeRouter, MeasuresTheCpuFirstAndThenTheGpu) {
  ResizeRouter r;
  EXPECT_FALSE(r.gpu(kPixels));
  r.note_cpu(kPixels, 1e-3);
  EXPECT_TRUE(r.gpu(kPixels));  // the GPU's cost is unknown until a batch comes back
  EXPECT_TRUE(r.gpu(kPixels));
  EXPECT_EQ(r.gpu_images(), 2u);
  EXPECT_EQ(r.cpu_images(), 1u);
}

// Counts the GPU's share of 1,000 images once both costs are known.
int gpu_share(double cpu_seconds_per_image, double gpu_seconds_per_image, double pixels = kPixels) {
  ResizeRouter r;
  r.note_cpu(kPixels, cpu_seconds_per_image);
  r.note_gpu(10, 10 * gpu_seconds_per_image);
  int g = 0;
  for (int i = 0; i < 1000; ++i) g += r.gpu(pixels) ? 1 : 0;
  return g;
}

TEST(ResizeRouter, SendsImagesWhereTheyCostLessAndStillProbesTheOtherPath) {
  const int cheap_gpu = gpu_share(1e-3, 1e-4);
  EXPECT_GE(cheap_gpu, 1000 - 1000 / ResizeRouter::kExplore - 1);
  EXPECT_LT(cheap_gpu, 1000);  // the CPU is still measured now and then
  const int dear_gpu = gpu_share(1e-4, 1e-3);
  EXPECT_LE(dear_gpu, 1000 / ResizeRouter::kExplore + 1);
  EXPECT_GT(dear_gpu, 0);  // and so is the GPU
}

TEST(ResizeRouter, TheCpuCostGrowsWithTheImage) {
  // 1 ms for a 600 x 450 image on the CPU against 0.5 ms per image on the GPU: small images stay
  // on the CPU, images four times as large go to the GPU.
  EXPECT_LT(gpu_share(1e-3, 5e-4, kPixels / 4), 100);
  EXPECT_GT(gpu_share(1e-3, 5e-4, kPixels * 4), 900);
}

TEST(ResizeRouter, FollowsAGpuThatBecomesBusy) {
  ResizeRouter r;
  r.note_cpu(kPixels, 1e-3);
  r.note_gpu(10, 10 * 1e-4);
  EXPECT_TRUE(r.gpu(kPixels));
  for (int k = 0; k < 10; ++k) r.note_gpu(10, 10 * 5e-3);  // e.g. many ranks now share the GPU
  EXPECT_FALSE(r.gpu(kPixels));
  EXPECT_GT(r.gpu_seconds_per_image(), 1e-3);
  EXPECT_NEAR(r.cpu_seconds_per_pixel(), 1e-3 / kPixels, 1e-15);
}

}  // namespace
}  // namespace convoy::datagen
