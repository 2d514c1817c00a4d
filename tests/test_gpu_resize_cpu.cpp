// The CUDA resize's per-pixel arithmetic (datagen/gpu_resize_math.h), run on the CPU against the
// real CPU path (datagen/resize.cpp, cv::resize), so CI checks the kernel's maths without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <opencv2/core.hpp>

#include "datagen/gpu_resize.h"
#include "datagen/resize.h"
#include "shared/error.h"

namespace convoy::datagen {
namespace {

struct Diff {
  int max = 0;
  long count = 0;
};

cv::Mat random_image(std::mt19937& rng, int w, int h, int c) {
  cv::Mat m(h, w, c == 1 ? CV_8UC1 : CV_8UC3);
  // Smooth content with noise on top: pure noise would hide rounding offsets at edges of flat areas.
  std::uniform_int_distribution<int> noise(-20, 20);
  const int fx = 1 + rng() % 37, fy = 1 + rng() % 29;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < c; ++k) {
        int v = (x * fx + y * fy + k * 60) % 256 + noise(rng);
        m.ptr<uint8_t>(y)[x * c + k] = static_cast<uint8_t>(std::clamp(v, 0, 255));
      }
  return m;
}

// Runs resize_pixel over every output pixel of one image.
std::vector<uint8_t> emulate(const cv::Mat& img, int size, ResizePolicy policy, ResizeMethod* method) {
  const int c = img.channels();
  ResizeJob j = plan_resize_job(img.cols, img.rows, c, img.step, size, policy);
  *method = j.method;
  std::vector<uint8_t> out(static_cast<size_t>(size) * size * c);
  const uint8_t* src = img.data + j.src_offset;
  for (int y = 0; y < size; ++y)
    for (int x = 0; x < size; ++x) resize_pixel(j, src, x, y, &out[(static_cast<size_t>(y) * size + x) * c]);
  return out;
}

Diff compare(const cv::Mat& img, int size, ResizePolicy policy, ResizeMethod* method) {
  const int c = img.channels();
  std::vector<uint8_t> ref(static_cast<size_t>(size) * size * c);
  resize_to_square(img, size, policy, ref.data());
  std::vector<uint8_t> got = emulate(img, size, policy, method);
  Diff d;
  for (size_t i = 0; i < ref.size(); ++i) {
    int e = std::abs(int(ref[i]) - int(got[i]));
    if (e) ++d.count;
    d.max = std::max(d.max, e);
  }
  return d;
}

struct Case {
  int w, h, c, size;
  ResizePolicy policy;
};

TEST(GpuResizeMath, MatchesCvResizeOnManyShapes) {
  std::mt19937 rng(12345);
  std::vector<Case> cases = {
      {1, 1, 3, 32, ResizePolicy::crop},       {1, 1, 1, 17, ResizePolicy::squash},
      {3, 2, 3, 31, ResizePolicy::squash},     {7, 5, 1, 64, ResizePolicy::crop},
      {64, 64, 3, 64, ResizePolicy::crop},     {128, 128, 3, 64, ResizePolicy::crop},
      {192, 96, 3, 32, ResizePolicy::squash},  {96, 128, 1, 32, ResizePolicy::crop},
      {500, 375, 3, 224, ResizePolicy::crop},  {500, 375, 3, 256, ResizePolicy::squash},
      {375, 500, 1, 227, ResizePolicy::crop},  {333, 257, 3, 256, ResizePolicy::crop},
      {257, 333, 3, 300, ResizePolicy::crop},  {1000, 30, 3, 64, ResizePolicy::squash},
      {30, 1000, 1, 64, ResizePolicy::squash}, {4000, 300, 3, 256, ResizePolicy::crop},
      {4000, 300, 3, 256, ResizePolicy::squash}, {768, 512, 3, 256, ResizePolicy::squash},
      {1999, 1501, 3, 96, ResizePolicy::crop}, {640, 480, 1, 480, ResizePolicy::squash},
      {31, 29, 3, 256, ResizePolicy::squash},  {255, 255, 3, 256, ResizePolicy::crop},
      {768, 768, 3, 256, ResizePolicy::crop},  {512, 600, 1, 256, ResizePolicy::crop},
      {2500, 1900, 3, 256, ResizePolicy::crop}, {2500, 1900, 3, 224, ResizePolicy::squash},
      {1, 700, 1, 64, ResizePolicy::squash},   {700, 1, 3, 64, ResizePolicy::squash},
      {1, 700, 3, 64, ResizePolicy::crop},     {900, 450, 3, 300, ResizePolicy::squash},
  };
  for (int i = 0; i < 40; ++i) {
    const int w = 1 + rng() % 700, h = 1 + rng() % 700;
    const int size = 1 + rng() % 300;
    cases.push_back({w, h, (rng() % 2) ? 3 : 1, size, (rng() % 2) ? ResizePolicy::crop : ResizePolicy::squash});
  }
  long total = 0, values = 0, area_diffs = 0;
  int seen[4] = {0, 0, 0, 0};
  int worst = 0;
  for (const Case& k : cases) {
    cv::Mat img = random_image(rng, k.w, k.h, k.c);
    ResizeMethod m;
    Diff d = compare(img, k.size, k.policy, &m);
    total += d.count;
    values += static_cast<long>(k.size) * k.size * k.c;
    worst = std::max(worst, d.max);
    if (m != ResizeMethod::linear) area_diffs += d.count;
    ++seen[int(m)];
    EXPECT_LE(d.max, 1) << k.w << "x" << k.h << "x" << k.c << " -> " << k.size << " "
                        << resize_policy_name(k.policy) << " method " << int(m);
  }
  std::printf("values %ld, differing %ld, max abs diff %d\n", values, total, worst);
  for (int m = 0; m < 4; ++m) EXPECT_GT(seen[m], 0) << "no case took method " << m;
  // Copy and both area paths use the same float operations in the same order: they match exactly.
  EXPECT_EQ(area_diffs, 0);
}

TEST(GpuResizeMath, PlanFollowsTheCpuChoices) {
  EXPECT_EQ(plan_resize_job(256, 256, 3, 768, 256, ResizePolicy::crop).method, ResizeMethod::copy);
  EXPECT_EQ(plan_resize_job(512, 300, 3, 1536, 256, ResizePolicy::squash).method, ResizeMethod::area);
  EXPECT_EQ(plan_resize_job(512, 768, 3, 1536, 256, ResizePolicy::squash).method, ResizeMethod::area_fast);
  EXPECT_EQ(plan_resize_job(100, 300, 1, 100, 256, ResizePolicy::squash).method, ResizeMethod::linear);
  ResizeJob crop = plan_resize_job(500, 300, 3, 1500, 128, ResizePolicy::crop);
  EXPECT_EQ(crop.src_w, 300);
  EXPECT_EQ(crop.src_h, 300);
  EXPECT_EQ(crop.src_offset, 100u * 3);
  EXPECT_THROW(plan_resize_job(10, 10, 3, 30, 8, ResizePolicy::short_side), convoy::Error);
  EXPECT_THROW(plan_resize_job(10, 10, 3, 20, 8, ResizePolicy::crop), convoy::Error);
}

TEST(GpuResizeMath, NoCudaOrNoDeviceIsAClearError) {
  if (gpu_resize_built() && gpu_resize_device_count() > 0) GTEST_SKIP() << "a GPU is present";
  GpuResizeOptions o;
  o.size = 32;
  o.policy = ResizePolicy::crop;
  EXPECT_THROW(gpu_resize_device_for(0), convoy::Error);
  try {
    GpuResizer r(o);
    FAIL() << "a resizer was made without a usable GPU";
  } catch (const convoy::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--gpu-resize"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace convoy::datagen
