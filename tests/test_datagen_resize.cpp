// datagen's own resampler (shared/resize.cpp) against OpenCV's: INTER_AREA for shrinking, the
// filter whose coefficients it uses, and INTER_LINEAR for enlarging, on random images and scales.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include "shared/resize.h"

namespace convoy::datagen {
namespace {

// Half the images uniform noise (every rounding shows), half smooth gradients with noise and hard
// edges (photograph-like).
cv::Mat random_image(std::mt19937& rng, int w, int h, int c, bool noise_only) {
  cv::Mat m(h, w, CV_8UC(c));
  cv::theRNG().state = rng();
  if (noise_only) {
    cv::randu(m, 0, 256);
    return m;
  }
  std::uniform_int_distribution<int> noise(-15, 15);
  const int fx = 1 + rng() % 13, fy = 1 + rng() % 11;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < c; ++k) {
        const int edge = (x / 17 + y / 23) % 2 ? 60 : 0;
        const int v = (x * fx / 3 + y * fy / 2 + k * 50 + edge) % 256 + noise(rng);
        m.ptr<uint8_t>(y)[x * c + k] = static_cast<uint8_t>(std::clamp(v, 0, 255));
      }
  return m;
}

struct Stats {
  double mean = 0;
  int max = 0;
};

Stats difference(const std::vector<uint8_t>& a, const cv::Mat& b) {
  EXPECT_TRUE(b.isContinuous());
  EXPECT_EQ(a.size(), b.total() * b.elemSize());
  Stats s;
  long sum = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const int e = std::abs(int(a[i]) - int(b.data[i]));
    sum += e;
    s.max = std::max(s.max, e);
  }
  s.mean = double(sum) / double(a.size());
  return s;
}

cv::Mat region_of(const cv::Mat& img, ResizePolicy policy) {
  if (policy != ResizePolicy::crop) return img;
  const int side = std::min(img.cols, img.rows);
  return img(cv::Rect((img.cols - side) / 2, (img.rows - side) / 2, side, side));
}

struct Case {
  int w, h, size;
  ResizePolicy policy;
  const char* what;
};

void compare(const std::vector<Case>& cases, int interpolation, double mean_limit, int max_limit,
             int* worst_max = nullptr, double* worst_mean = nullptr) {
  std::mt19937 rng(2026);
  for (const Case& k : cases)
    for (int c : {1, 3})
      for (bool noise : {true, false}) {
        const cv::Mat img = random_image(rng, k.w, k.h, c, noise);
        std::vector<uint8_t> ours(size_t(k.size) * k.size * c);
        resize_to_square(img, k.size, k.policy, ours.data());
        cv::Mat ref;
        cv::resize(region_of(img, k.policy), ref, cv::Size(k.size, k.size), 0, 0, interpolation);
        const Stats s = difference(ours, ref);
        std::printf("%-26s %4dx%-4d -> %3d %-6s C=%d %-6s mean %.4f max %d\n", k.what, k.w, k.h, k.size,
                    resize_policy_name(k.policy), c, noise ? "noise" : "smooth", s.mean, s.max);
        EXPECT_LT(s.mean, mean_limit) << k.what << " C=" << c;
        EXPECT_LE(s.max, max_limit) << k.what << " C=" << c;
        if (worst_max) *worst_max = std::max(*worst_max, s.max);
        if (worst_mean) *worst_mean = std::max(*worst_mean, s.mean);
      }
}

TEST(DatagenResize, ShrinkStaysCloseToInterArea) {
  const std::vector<Case> cases = {
      {500, 375, 256, ResizePolicy::crop, "ImageNet 375 -> 256"},
      {500, 375, 224, ResizePolicy::crop, "375 -> 224"},
      {500, 375, 256, ResizePolicy::squash, "squash 500x375 -> 256"},
      {300, 300, 256, ResizePolicy::crop, "slight, 300 -> 256"},
      {257, 300, 256, ResizePolicy::crop, "257 -> 256"},
      {768, 768, 256, ResizePolicy::crop, "integer 3x"},
      {1024, 1200, 256, ResizePolicy::crop, "integer 4x"},
      {1999, 1501, 96, ResizePolicy::crop, "large ratio"},
      {900, 300, 128, ResizePolicy::squash, "squash 7x and 2.3x"},
  };
  int worst_max = 0;
  double worst_mean = 0;
  compare(cases, cv::INTER_AREA, 0.1, 1, &worst_max, &worst_mean);
  std::printf("against INTER_AREA: worst mean abs diff %.4f, worst max diff %d\n", worst_mean, worst_max);
}

TEST(DatagenResize, HalvingEqualsInterAreaExactly) {
  // At exactly 2x both are the rounded mean of 2 x 2 pixels, (sum + 2) / 4.
  compare({{512, 600, 256, ResizePolicy::crop, "integer 2x"}, {300, 200, 100, ResizePolicy::crop, "200 -> 100"}},
          cv::INTER_AREA, 1e-9, 0);
}

TEST(DatagenResize, EnlargeStaysCloseToInterLinear) {
  // OpenCV's bilinear keeps 11-bit weights and rounds in two places of its own; one level apart at most.
  compare({{100, 80, 256, ResizePolicy::crop, "80 -> 256"},
           {200, 255, 256, ResizePolicy::crop, "200 -> 256"},
           {64, 48, 200, ResizePolicy::squash, "squash 64x48 -> 200"},
           {2, 3, 31, ResizePolicy::squash, "tiny"}},
          cv::INTER_LINEAR, 0.5, 1);
}

TEST(DatagenResize, MixedSquashFiltersEachAxisOnItsOwn) {
  // 600 x 100 -> 128: x shrinks (box), y enlarges (bilinear). The reference does the two axes with
  // OpenCV one after the other, rounding to 8 bits in between, hence one level more of tolerance.
  std::mt19937 rng(7);
  for (int c : {1, 3}) {
    const cv::Mat img = random_image(rng, 600, 100, c, false);
    std::vector<uint8_t> ours(128 * 128 * c);
    resize_to_square(img, 128, ResizePolicy::squash, ours.data());
    cv::Mat narrow, ref;
    cv::resize(img, narrow, cv::Size(128, 100), 0, 0, cv::INTER_AREA);
    cv::resize(narrow, ref, cv::Size(128, 128), 0, 0, cv::INTER_LINEAR);
    const Stats s = difference(ours, ref);
    std::printf("mixed 600x100 -> 128 C=%d: mean %.4f max %d\n", c, s.mean, s.max);
    EXPECT_LT(s.mean, 0.5);
    EXPECT_LE(s.max, 2);
  }
}

TEST(DatagenResize, FlatStaysFlatAndRowsAreIndependentOfTheRest) {
  // Weights of each output add up to exactly one: any flat image comes out exactly flat.
  for (int v : {0, 1, 127, 254, 255}) {
    cv::Mat flat(375, 500, CV_8UC3, cv::Scalar(v, v, v));
    std::vector<uint8_t> out(224 * 224 * 3);
    resize_to_square(flat, 224, ResizePolicy::crop, out.data());
    for (uint8_t o : out) ASSERT_EQ(o, v);
  }
  // A region that is a view into a larger image (row stride > row) gives the same result as a
  // packed copy of it.
  std::mt19937 rng(3);
  const cv::Mat big = random_image(rng, 700, 500, 3, true);
  const cv::Mat view = big(cv::Rect(13, 7, 401, 333));
  const cv::Mat packed = view.clone();
  std::vector<uint8_t> a(160 * 160 * 3), b(160 * 160 * 3);
  resize_to_square(view, 160, ResizePolicy::squash, a.data());
  resize_to_square(packed, 160, ResizePolicy::squash, b.data());
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace convoy::datagen
