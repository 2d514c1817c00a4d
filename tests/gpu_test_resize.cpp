// --gpu-resize against the CPU path: random images of many shapes, batched as datagen batches them,
// every GPU sample equal to resize_to_square byte for byte, channel sums exact, several threads on
// one GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

#include <opencv2/core.hpp>

#include "datagen/gpu_resize.h"
#include "shared/error.h"
#include "shared/resize.h"

namespace convoy::datagen {
namespace {

cv::Mat random_image(std::mt19937& rng, int w, int h, int c) {
  cv::Mat m(h, w, c == 1 ? CV_8UC1 : CV_8UC3);
  std::uniform_int_distribution<int> noise(-25, 25);
  const int fx = 1 + rng() % 37, fy = 1 + rng() % 29;
  for (int y = 0; y < h; ++y) {
    uint8_t* row = m.ptr<uint8_t>(y);
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < c; ++k)
        row[x * c + k] = static_cast<uint8_t>(std::clamp((x * fx + y * fy + k * 60) % 256 + noise(rng), 0, 255));
  }
  return m;
}

struct Shape {
  int w, h;
};

// Tiny, odd, 1 px, very long, large; shrinking and enlarging for the sizes used below.
const std::vector<Shape> kShapes = {
    {1, 1},      {2, 3},      {7, 5},       {31, 17},     {64, 64},    {97, 203},  {128, 128}, {255, 256},
    {256, 256},  {333, 257},  {500, 375},   {375, 500},   {512, 1024}, {768, 512}, {1000, 30}, {30, 1000},
    {4000, 300}, {300, 4000}, {2500, 1900}, {1901, 2499}, {1, 700},    {640, 1},
};

struct Tally {
  long values = 0, differing = 0;
  int max_diff = 0;
};

// Resizes every shape (plus random ones) through a GpuResizer with a small staging buffer, so
// batches fill up, and compares each sample with resize_to_square.
Tally run_and_compare(int channels, int size, ResizePolicy policy, bool sums, unsigned seed, size_t staging = 8u << 20,
                      int max_images = 16) {
  std::mt19937 rng(seed);
  std::vector<Shape> shapes = kShapes;
  for (int i = 0; i < 24; ++i) shapes.push_back({1 + int(rng() % 900), 1 + int(rng() % 900)});
  std::vector<cv::Mat> images;
  for (const Shape& s : shapes) images.push_back(random_image(rng, s.w, s.h, channels));

  GpuResizeOptions o;
  o.device = 0;
  o.size = size;
  o.policy = policy;
  o.channels = channels;
  o.staging_bytes = staging;
  o.max_images = max_images;
  o.channel_sums = sums;
  GpuResizer gpu(o);

  Tally t;
  const size_t sample = static_cast<size_t>(size) * size * channels;
  std::vector<uint8_t> ref(sample);
  size_t next = 0;
  while (next < images.size()) {
    const size_t first = next;
    while (next < images.size()) {
      const cv::Mat& m = images[next];
      if (!gpu.add(m.data, m.step, m.cols, m.rows)) break;
      ++next;
    }
    EXPECT_GT(next, first) << "an empty batch refused an image";
    if (next == first) break;
    EXPECT_EQ(gpu.count(), int(next - first));
    gpu.submit();
    gpu.wait();
    for (size_t i = first; i < next; ++i) {
      const cv::Mat& m = images[i];
      resize_to_square(m, size, policy, ref.data());
      const uint8_t* got = gpu.output(int(i - first));
      long diff_here = 0;
      int max_here = 0;
      for (size_t k = 0; k < sample; ++k) {
        const int e = std::abs(int(got[k]) - int(ref[k]));
        if (e) ++diff_here;
        max_here = std::max(max_here, e);
      }
      EXPECT_EQ(diff_here, 0) << m.cols << "x" << m.rows << "x" << channels << " -> " << size << " "
                              << resize_policy_name(policy) << ": " << diff_here << " values differ, by up to "
                              << max_here;
      t.values += long(sample);
      t.differing += diff_here;
      t.max_diff = std::max(t.max_diff, max_here);
      if (sums) {
        // The GPU sums must be exactly the sums of the GPU's own output.
        const ChannelSums& s = gpu.sums(int(i - first));
        for (int c = 0; c < channels; ++c) {
          uint64_t sum = 0, sq = 0;
          for (size_t k = c; k < sample; k += channels) {
            sum += got[k];
            sq += uint64_t(got[k]) * got[k];
          }
          EXPECT_EQ(s.sum[c], sum) << "channel " << c << " of image " << i;
          EXPECT_EQ(s.sum_sq[c], sq) << "channel " << c << " of image " << i;
        }
      }
    }
  }
  const GpuResizeTimes& tm = gpu.times();
  EXPECT_EQ(tm.images, images.size());
  EXPECT_GT(tm.batches, 1u);
  EXPECT_GT(tm.bytes_up, 0u);
  EXPECT_GT(tm.kernel_s, 0.0);
  EXPECT_GT(tm.upload_s, 0.0);
  EXPECT_GT(tm.download_s, 0.0);
  std::printf(
      "%s C=%d S=%d: %ld values, %ld differ, max abs diff %d; %llu batches, up %.2f ms, "
      "kernel %.2f ms, down %.2f ms, wait %.2f ms\n",
      resize_policy_name(policy), channels, size, t.values, t.differing, t.max_diff, (unsigned long long)tm.batches,
      tm.upload_s * 1e3, tm.kernel_s * 1e3, tm.download_s * 1e3, tm.wait_s * 1e3);
  return t;
}

TEST(GpuResize, CropRgbShrinkAndEnlarge) {
  Tally t = run_and_compare(3, 224, ResizePolicy::crop, false, 1);
  EXPECT_EQ(t.differing, 0);
}

TEST(GpuResize, SquashRgbWithChannelSums) {
  Tally t = run_and_compare(3, 256, ResizePolicy::squash, true, 2);
  EXPECT_EQ(t.differing, 0);
}

TEST(GpuResize, CropGraySmallSize) {
  Tally t = run_and_compare(1, 28, ResizePolicy::crop, true, 3);
  EXPECT_EQ(t.differing, 0);
}

TEST(GpuResize, SquashGrayOddSize) {
  Tally t = run_and_compare(1, 97, ResizePolicy::squash, false, 4);
  EXPECT_EQ(t.differing, 0);
}

TEST(GpuResize, ImageLargerThanStagingGrowsIt) {
  // 2500x1900x3 is 14 MB; a 1 MB staging buffer must grow for it instead of refusing it forever.
  Tally t = run_and_compare(3, 128, ResizePolicy::crop, false, 5, 1u << 20, 4);
  EXPECT_EQ(t.differing, 0);
}

TEST(GpuResize, StageDecodesStraightIntoPinnedMemory) {
  std::mt19937 rng(6);
  cv::Mat img = random_image(rng, 640, 480, 3);
  GpuResizeOptions o;
  o.size = 200;
  o.policy = ResizePolicy::crop;
  o.channels = 3;
  GpuResizer gpu(o);
  uint8_t* p = gpu.stage(img.cols, img.rows);
  ASSERT_NE(p, nullptr);
  std::copy(img.data, img.data + img.total() * 3, p);
  gpu.submit();
  gpu.wait();
  std::vector<uint8_t> ref(200 * 200 * 3);
  resize_to_square(img, 200, ResizePolicy::crop, ref.data());
  EXPECT_TRUE(std::equal(ref.begin(), ref.end(), gpu.output(0)));
  // The next stage starts a new batch; reading the old one is then refused.
  ASSERT_NE(gpu.stage(10, 10), nullptr);
  EXPECT_THROW(gpu.output(0), convoy::Error);
}

TEST(GpuResize, ThreadsWithTheirOwnStreamsShareTheGpu) {
  std::vector<Tally> tallies(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] { tallies[i] = run_and_compare(3, 160, ResizePolicy::crop, true, 10 + i); });
  for (auto& th : threads) th.join();
  for (const Tally& t : tallies) {
    EXPECT_EQ(t.differing, 0);
    EXPECT_GT(t.values, 0);
  }
}

TEST(GpuResize, BadDeviceAndPolicyAreClearErrors) {
  GpuResizeOptions o;
  o.size = 64;
  o.policy = ResizePolicy::crop;
  o.device = gpu_resize_device_count();
  EXPECT_THROW(GpuResizer{o}, convoy::Error);
  EXPECT_EQ(gpu_resize_device_for(gpu_resize_device_count()), 0);
  EXPECT_NO_THROW(gpu_resize_check_available());  // the driver's list agrees with CUDA here
  o.device = 0;
  o.policy = ResizePolicy::short_side;
  EXPECT_THROW(GpuResizer{o}, convoy::Error);
}

}  // namespace
}  // namespace convoy::datagen
