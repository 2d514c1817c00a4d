// The CUDA resize's per-pixel arithmetic (shared/resize_math.h), run on the CPU against the
// real CPU path (shared/resize.cpp), so CI checks without a GPU that the kernel's maths is exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <opencv2/core.hpp>

#include "datagen/gpu_resize.h"
#include "shared/error.h"
#include "shared/resize.h"

namespace convoy::datagen {
namespace {

cv::Mat random_image(std::mt19937& rng, int w, int h, int c) {
  cv::Mat m(h, w, CV_8UC(c));
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

// Runs resize_pixel, as the kernel does, over every output pixel of one image.
std::vector<uint8_t> emulate(const cv::Mat& img, int size, ResizePolicy policy, ResizeJob* job) {
  const int c = img.channels();
  const ResizeJob j = plan_resize_job(img.cols, img.rows, c, img.step, size, policy);
  *job = j;
  std::vector<uint8_t> out(static_cast<size_t>(size) * size * c);
  const uint8_t* src = img.data + j.src_offset;
  for (int y = 0; y < size; ++y)
    for (int x = 0; x < size; ++x) resize_pixel(j, src, x, y, &out[(static_cast<size_t>(y) * size + x) * c]);
  return out;
}

struct Case {
  int w, h, c, size;
  ResizePolicy policy;
};

TEST(GpuResizeMath, EqualsTheCpuPathBitForBit) {
  std::mt19937 rng(12345);
  std::vector<Case> cases = {
      {1, 1, 3, 32, ResizePolicy::crop},          {1, 1, 1, 17, ResizePolicy::squash},
      {3, 2, 3, 31, ResizePolicy::squash},        {7, 5, 1, 64, ResizePolicy::crop},
      {64, 64, 3, 64, ResizePolicy::crop},        {128, 128, 3, 64, ResizePolicy::crop},
      {192, 96, 3, 32, ResizePolicy::squash},     {96, 128, 1, 32, ResizePolicy::crop},
      {500, 375, 3, 224, ResizePolicy::crop},     {500, 375, 3, 256, ResizePolicy::squash},
      {500, 375, 3, 256, ResizePolicy::crop},     {375, 500, 1, 227, ResizePolicy::crop},
      {333, 257, 3, 256, ResizePolicy::crop},     {257, 333, 3, 300, ResizePolicy::crop},
      {1000, 30, 3, 64, ResizePolicy::squash},    {30, 1000, 1, 64, ResizePolicy::squash},
      {4000, 300, 3, 256, ResizePolicy::crop},    {4000, 300, 3, 256, ResizePolicy::squash},
      {768, 512, 3, 256, ResizePolicy::squash},   {1999, 1501, 3, 96, ResizePolicy::crop},
      {640, 480, 1, 480, ResizePolicy::squash},   {31, 29, 3, 256, ResizePolicy::squash},
      {255, 255, 3, 256, ResizePolicy::crop},     {768, 768, 3, 256, ResizePolicy::crop},
      {512, 600, 1, 256, ResizePolicy::crop},     {2500, 1900, 3, 256, ResizePolicy::crop},
      {2500, 1900, 3, 224, ResizePolicy::squash}, {1, 700, 1, 64, ResizePolicy::squash},
      {700, 1, 3, 64, ResizePolicy::squash},      {1, 700, 3, 64, ResizePolicy::crop},
      {900, 450, 3, 300, ResizePolicy::squash},   {300, 200, 3, 256, ResizePolicy::squash},
      {256, 300, 3, 256, ResizePolicy::squash},   {5000, 100, 3, 1, ResizePolicy::squash},
      {100, 80, 2, 50, ResizePolicy::squash},     {90, 120, 4, 64, ResizePolicy::crop},
      {40, 60, 4, 100, ResizePolicy::squash},     {3000, 50, 3, 40, ResizePolicy::squash},
  };
  for (int i = 0; i < 40; ++i) {
    const int w = 1 + rng() % 700, h = 1 + rng() % 700;
    const int size = 1 + rng() % 300;
    cases.push_back({w, h, (rng() % 2) ? 3 : 1, size, (rng() % 2) ? ResizePolicy::crop : ResizePolicy::squash});
  }
  long values = 0;
  int copies = 0, seen[3] = {0, 0, 0};
  std::printf("resize_to_square uses %s here; the baseline path is checked too\n", resize_instruction_set());
  for (const Case& k : cases) {
    cv::Mat img = random_image(rng, k.w, k.h, k.c);
    std::vector<uint8_t> ref(static_cast<size_t>(k.size) * k.size * k.c), base(ref.size());
    resize_to_square(img, k.size, k.policy, ref.data());
    resize_force_baseline(true);
    resize_to_square(img, k.size, k.policy, base.data());
    resize_force_baseline(false);
    ResizeJob j;
    const std::vector<uint8_t> got = emulate(img, k.size, k.policy, &j);
    size_t differ = 0;
    for (size_t i = 0; i < ref.size(); ++i) differ += (ref[i] != got[i]) + (base[i] != got[i]);
    values += static_cast<long>(ref.size());
    if (j.method == ResizeMethod::copy) {
      ++copies;
    } else {
      ++seen[int(j.x.filter)];
      ++seen[int(j.y.filter)];
    }
    EXPECT_EQ(differ, 0u) << k.w << "x" << k.h << "x" << k.c << " -> " << k.size << " " << resize_policy_name(k.policy);
  }
  std::printf("%zu images, %ld values compared\n", cases.size(), values);
  EXPECT_GT(copies, 0);
  for (int f = 0; f < 3; ++f) EXPECT_GT(seen[f], 0) << "no axis took filter " << f;
}

TEST(GpuResizeMath, PlanPicksAFilterPerAxis) {
  EXPECT_EQ(plan_resize_job(256, 256, 3, 768, 256, ResizePolicy::crop).method, ResizeMethod::copy);
  const ResizeJob shrink = plan_resize_job(512, 300, 3, 1536, 256, ResizePolicy::squash);
  EXPECT_EQ(shrink.method, ResizeMethod::separable);
  EXPECT_EQ(shrink.x.filter, AxisFilter::box);
  EXPECT_EQ(shrink.y.filter, AxisFilter::box);
  const ResizeJob mixed = plan_resize_job(100, 300, 1, 100, 256, ResizePolicy::squash);
  EXPECT_EQ(mixed.x.filter, AxisFilter::linear);
  EXPECT_EQ(mixed.y.filter, AxisFilter::box);
  const ResizeJob one = plan_resize_job(256, 300, 1, 256, 256, ResizePolicy::squash);
  EXPECT_EQ(one.x.filter, AxisFilter::identity);
  EXPECT_EQ(one.y.filter, AxisFilter::box);
  const ResizeJob crop = plan_resize_job(500, 300, 3, 1500, 128, ResizePolicy::crop);
  EXPECT_EQ(crop.src_w, 300);
  EXPECT_EQ(crop.src_h, 300);
  EXPECT_EQ(crop.src_offset, 100u * 3);
  EXPECT_EQ(crop.x.src_len, 300);
  EXPECT_EQ(crop.x.dst_len, 128);
  EXPECT_THROW(plan_resize_job(10, 10, 3, 30, 8, ResizePolicy::short_side), convoy::Error);
  EXPECT_THROW(plan_resize_job(10, 10, 3, 20, 8, ResizePolicy::crop), convoy::Error);
}

// The weights of every output coordinate add up to exactly 1 (2^14), none is negative, taps stay
// inside the source, and the box weights are the overlaps (INTER_AREA's coefficients) to within
// rounding.
TEST(GpuResizeMath, AxisWeightsAreExactPartitionsOfOne) {
  using namespace rmath;
  const int lengths[][2] = {{375, 256}, {500, 256}, {512, 256}, {768, 256}, {257, 256}, {4000, 17}, {100000, 3},
                            {3, 1},     {1, 1},     {1, 9},     {2, 256},   {255, 256}, {17, 4000}};
  for (const auto& l : lengths) {
    const int src = l[0], dst = l[1];
    const AxisFilter f = src == dst ? AxisFilter::identity : (src > dst ? AxisFilter::box : AxisFilter::linear);
    const AxisPlan a{src, dst, f};
    for (int d = 0; d < dst; ++d) {
      const TapRange r = axis_taps(a, d);
      ASSERT_GE(r.first, 0);
      ASSERT_GE(r.count, 1);
      ASSERT_LE(r.first + r.count, src) << src << " -> " << dst << " at " << d;
      int32_t sum = 0;
      for (int s = r.first; s < r.first + r.count; ++s) {
        const int32_t w = axis_weight(a, d, s);
        ASSERT_GE(w, 0);
        sum += w;
        if (f == AxisFilter::box) {
          const double lo = double(d) * src / dst, hi = double(d + 1) * src / dst;
          const double overlap = std::min(hi, s + 1.0) - std::max(lo, double(s));
          EXPECT_NEAR(w, overlap / (hi - lo) * kWeightOne, 1.0) << src << " -> " << dst << " d " << d << " s " << s;
        }
      }
      ASSERT_EQ(sum, kWeightOne) << src << " -> " << dst << " at " << d;
    }
  }
}

TEST(GpuResizeMath, NoCudaOrNoDeviceIsAClearError) {
  if (gpu_resize_built() && gpu_resize_device_count() > 0) GTEST_SKIP() << "a GPU is present";
  GpuResizeOptions o;
  o.size = 32;
  o.policy = ResizePolicy::crop;
  EXPECT_THROW(gpu_resize_device_for(0), convoy::Error);
  // The up-front check asks the driver's GPU list, not CUDA: without that list (no driver) or
  // without CUDA in the build it refuses too.
  if (!gpu_resize_built() || !std::filesystem::exists("/proc/driver/nvidia/gpus")) {
    try {
      gpu_resize_check_available();
      ADD_FAILURE() << "--gpu-resize passed the up-front check without CUDA or a driver";
    } catch (const convoy::Error& e) {
      EXPECT_NE(std::string(e.what()).find("--gpu-resize"), std::string::npos) << e.what();
    }
  }
  try {
    GpuResizer r(o);
    FAIL() << "a resizer was made without a usable GPU";
  } catch (const convoy::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--gpu-resize"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace convoy::datagen
