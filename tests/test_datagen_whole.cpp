// datagen --resize short:S (--max-side M): whole images at their own sizes in batch-file format
// v2, raw and JPEG; their sizes as torchvision's Resize computes them, their pixels, statistics,
// dataset.json, verify, byte-identity across threads, resume, and the refusal of the flags.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <utility>

#include "datagen/dataset_tools.h"
#include "datagen/image_codec.h"
#include "datagen/run.h"
#include "shared/batch_file.h"
#include "shared/dataset_meta.h"
#include "shared/error.h"
#include "shared/resize.h"
#include "test_datagen_fixtures.h"

using namespace convoy;
using namespace convoy::datagen;
using namespace fixtures;

namespace {

// Portrait, landscape, square, and one wide enough for the long-side cap; every size distinct.
struct Source {
  int w, h;
  uint32_t out_h, out_w;  // by hand: torchvision's Resize(16, max_size=40)
};
const Source kSources[] = {
    {20, 40, 32, 16},  // portrait: short side 20 -> 16, long 16 x 40 / 20
    {60, 30, 16, 32},  // landscape
    {33, 33, 16, 16},  // square (its JPEG decodes at 1/2 DCT scale, 17 x 17)
    {100, 20, 8, 40},  // 16 x 80 is past the cap: long side 40, short floor(40 x 16 / 80)
    {18, 27, 24, 16},  // 16 x floor(16 x 27 / 18) = 24
    {45, 21, 16, 34},  // floor(16 x 45 / 21) = 34
};

Members sources() {
  Members m;
  int k = 0;
  for (const Source& s : kSources) {
    m.push_back({"c" + std::to_string(k % 2) + "/s" + std::to_string(k) + ".jpg", rgb_jpeg(s.w, s.h, 7 + k)});
    ++k;
  }
  return m;
}

RunOptions options(const std::string& input, const std::string& out) {
  RunOptions o;
  o.inputs = {input};
  o.output = out;
  o.size = 16;
  o.max_side = 40;
  o.resize = ResizePolicy::short_side;
  o.channels = 3;
  o.per_file = 4;
  o.seed = 5;
  o.threads = 2;
  return o;
}

std::vector<std::string> batch_files(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".cvb") names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<Batch> read_all(const std::string& dir) {
  std::vector<Batch> out;
  for (const auto& n : batch_files(dir)) out.push_back(read_batch_file(dir + "/" + n));
  return out;
}

void expect_same_batches(const std::string& a, const std::string& b) {
  const auto names = batch_files(a);
  ASSERT_FALSE(names.empty());
  ASSERT_EQ(names, batch_files(b));
  for (const auto& n : names) EXPECT_EQ(read_file(a + "/" + n), read_file(b + "/" + n)) << n;
}

// Each source's expected sample, keyed by its (height, width), which are all distinct: the pixels
// the run must have made, by the same decode and resize_whole.
std::map<std::pair<uint32_t, uint32_t>, std::vector<uint8_t>> expected_pixels() {
  std::map<std::pair<uint32_t, uint32_t>, std::vector<uint8_t>> want;
  ImageCodec codec;
  int k = 0;
  for (const Source& s : kSources) {
    const Bytes jpg = rgb_jpeg(s.w, s.h, 7 + k++);
    const cv::Mat img = codec.decode(reinterpret_cast<const uint8_t*>(jpg.data()), jpg.size(), 3, 16, {});
    std::vector<uint8_t> px(size_t(s.out_h) * s.out_w * 3);
    resize_whole(img, int(s.out_w), int(s.out_h), px.data());
    want[{s.out_h, s.out_w}] = px;
  }
  return want;
}

}  // namespace

TEST(DatagenWhole, ShortSideSizeIsTorchvisionsResize) {
  for (const Source& s : kSources) {
    const SideSize z = short_side_size(s.w, s.h, 16, 40);
    EXPECT_EQ(z.height, int(s.out_h)) << s.w << "x" << s.h;
    EXPECT_EQ(z.width, int(s.out_w)) << s.w << "x" << s.h;
  }
  // No cap: the long side as it comes; an image smaller than S is enlarged.
  EXPECT_EQ(short_side_size(100, 20, 16, 0).width, 80);
  EXPECT_EQ(short_side_size(8, 12, 16, 0).height, 24);
  EXPECT_EQ(short_side_size(500, 375, 256, 0).width, 341);  // floor(256 x 500 / 375 = 341.33)
}

TEST(DatagenWhole, ResizeWholeOfASquareIsSquash) {
  const std::vector<uint8_t> px = pattern(37, 23, 4);
  std::vector<uint8_t> a(16 * 16 * 3), b(16 * 16 * 3);
  resize_whole(PixelsIn{px.data(), 37, 23, 3, 37 * 3}, 16, 16, a.data());
  resize_to_square(PixelsIn{px.data(), 37, 23, 3, 37 * 3}, 16, ResizePolicy::squash, b.data());
  EXPECT_EQ(a, b);
}

TEST(DatagenWhole, RawAndJpegKeepEachImageAtItsOwnSize) {
  const std::string dir = scratch("whole_round_trip");
  write_tar(dir + "/x.tar", sources());
  ASSERT_EQ(run_datagen(options(dir + "/x.tar", dir + "/raw"), mpi()), 0);
  RunOptions j = options(dir + "/x.tar", dir + "/jpeg");
  j.encoding = Encoding::jpeg;
  j.quality = 95;
  ASSERT_EQ(run_datagen(j, mpi()), 0);
  EXPECT_EQ(verify_dataset(dir + "/raw"), std::vector<std::string>{});
  EXPECT_EQ(verify_dataset(dir + "/jpeg"), std::vector<std::string>{});

  const auto want = expected_pixels();
  std::map<std::pair<uint32_t, uint32_t>, int> seen;
  for (const Batch& b : read_all(dir + "/raw")) {
    EXPECT_EQ(b.version, kBatchVersion2);
    for (size_t i = 0; i < b.count(); ++i) {
      const ImageShape s = b.sample_shape(i);
      const auto it = want.find({s.height, s.width});
      ASSERT_NE(it, want.end()) << s.height << "x" << s.width;
      EXPECT_TRUE(std::equal(it->second.begin(), it->second.end(), b.raw_image(i))) << s.height << "x" << s.width;
      ++seen[{s.height, s.width}];
    }
  }
  EXPECT_EQ(seen.size(), std::size(kSources));
  ImageCodec codec;
  size_t jpegs = 0;
  for (const Batch& b : read_all(dir + "/jpeg"))
    for (size_t i = 0; i < b.count(); ++i, ++jpegs) {
      const cv::Mat img = codec.decode(b.images.data() + b.offsets[i], size_t(b.offsets[i + 1] - b.offsets[i]), 3, 0,
                                       {});
      EXPECT_EQ(img.rows, int(b.sample_shape(i).height));
      EXPECT_EQ(img.cols, int(b.sample_shape(i).width));
    }
  EXPECT_EQ(jpegs, std::size(kSources));

  const DatasetMeta raw = read_dataset_meta(dir + "/raw"), jpg = read_dataset_meta(dir + "/jpeg");
  EXPECT_TRUE(raw.resize.varied);
  EXPECT_EQ(raw.resize.short_side, 16u);
  EXPECT_EQ(raw.resize.max_side, 40u);
  const auto json = to_json(raw);
  EXPECT_EQ(json["format_version"], 2);
  EXPECT_EQ(json["image"], (nlohmann::json{{"resize", "short"}, {"short", 16}, {"max_side", 40}, {"channels", 3}}));
  EXPECT_FALSE(file_exists(dir + "/raw/mean_image.png"));
  // Statistics from the resized pixels, every pixel counted once: the same for raw and JPEG,
  // and equal to the mean of the expected samples' pixels.
  EXPECT_EQ(raw.mean, jpg.mean);
  EXPECT_EQ(raw.std, jpg.std);
  uint64_t sum = 0, n = 0;
  for (const auto& [dims, px] : want)
    for (size_t k = 0; k < px.size(); k += 3) sum += px[k], ++n;
  EXPECT_DOUBLE_EQ(raw.mean[0], double(sum) / double(n));
  EXPECT_NE(inspect_dataset(dir + "/raw").find("short side 16, long side at most 40"), std::string::npos);
}

TEST(DatagenWhole, ThreadsAndResumeGiveTheSameBytes) {
  const std::string dir = scratch("whole_threads");
  Members all = sources();
  for (auto& m : sources()) all.push_back({"more/" + m.first, m.second});
  write_tar(dir + "/x.tar", all);
  for (const Encoding e : {Encoding::raw, Encoding::jpeg}) {
    const std::string tag = encoding_name(e);
    RunOptions one = options(dir + "/x.tar", dir + "/" + tag + "1");
    one.encoding = e, one.threads = 1;
    RunOptions three = one;
    three.output = dir + "/" + tag + "3", three.threads = 3;
    ASSERT_EQ(run_datagen(one, mpi()), 0);
    ASSERT_EQ(run_datagen(three, mpi()), 0);
    expect_same_batches(one.output, three.output);
    auto a = to_json(read_dataset_meta(one.output)), b = to_json(read_dataset_meta(three.output));
    a.erase("timings"), b.erase("timings");
    EXPECT_EQ(a, b);
    // Resume: a file lost, dataset.json gone; the rest kept and the result the same.
    const auto names = batch_files(three.output);
    std::filesystem::remove(three.output + "/" + names[1]);
    std::filesystem::remove(three.output + "/dataset.json");
    ASSERT_EQ(run_datagen(three, mpi()), 0);
    expect_same_batches(one.output, three.output);
    auto c = to_json(read_dataset_meta(three.output));
    EXPECT_EQ(c["timings"]["kept_files"], names.size() - 1);
    c.erase("timings");
    EXPECT_EQ(a, c);
  }
}
