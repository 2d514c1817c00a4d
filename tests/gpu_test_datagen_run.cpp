// datagen --gpu-resize against the CPU path on one mixed archive: batch files byte-identical and
// dataset.json equal but for its timings, for raw and JPEG output, gray and RGB, crop and squash,
// 1 and 3 threads; and a thread's GpuLane delivering every sample to its slot across batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#undef CONVOY_TEST_TMP  // the build folder's tmp is not there where GPU tests run (a GPU host)
#define CONVOY_TEST_TMP "/tmp/convoy_gpu_tests"
#include "datagen/gpu_lane.h"
#include "datagen/run.h"
#include "shared/dataset_meta.h"
#include "shared/error.h"
#include "shared/mpi_context.h"
#include "shared/resize.h"
#include "test_datagen_fixtures.h"

using namespace convoy;
using namespace convoy::datagen;
using namespace fixtures;

namespace {

// Images of every kind the decoder takes, small and large (the DCT-scaled JPEG path, and a large
// PNG whose full-size resize is real work), plus members that are rejected.
void write_mixed_archive(const std::string& path) {
  std::mt19937 rng(7);
  Members a, b;
  for (int i = 0; i < 6; ++i) {
    const int w = 20 + int(rng() % 700), h = 20 + int(rng() % 500);
    a.push_back({"rgb" + std::to_string(i) + ".JPEG", rgb_jpeg(w, h, i)});
  }
  a.push_back({"big.JPEG", rgb_jpeg(2400, 1700, 9)});
  a.push_back({"tiny.JPEG", rgb_jpeg(9, 13, 4)});
  a.push_back({"gray.JPEG", gray_jpeg(300, 200, 90)});
  a.push_back({"cmyk.JPEG", cmyk_jpeg(120, 80, 255, 40, 0, 200)});
  a.push_back({"progressive.JPEG", rgb_jpeg(333, 444, 2, TJSAMP_444, TJFLAG_PROGRESSIVE)});
  cv::Mat big(1600, 2100, CV_8UC3);
  cv::randu(big, 0, 256);
  b.push_back({"big.png", png(big)});
  cv::Mat deep(90, 70, CV_16UC3, cv::Scalar(1000, 30000, 60000));
  b.push_back({"deep.png", png(deep)});
  b.push_back({"palette.png", palette_png(50, 40)});
  cv::Mat rgba(64, 48, CV_8UC4);
  cv::randu(rgba, 0, 256);
  b.push_back({"rgba.png", png(rgba)});
  b.push_back({"corrupt.JPEG", "\xFF\xD8\xFF\xE0garbage garbage garbage"});
  b.push_back({"empty.JPEG", ""});
  for (int i = 0; i < 5; ++i) b.push_back({"more" + std::to_string(i) + ".jpg", rgb_jpeg(256 + 64 * i, 256, 20 + i)});
  write_tar(path, {{"a.tar",
                    [&] {
                      write_tar(path + ".a", a);
                      return read_file(path + ".a");
                    }()},
                   {"b.tar", [&] {
                      write_tar(path + ".b", b);
                      return read_file(path + ".b");
                    }()}});
}

std::vector<std::string> batch_files(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".cvb") names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// A run over dir/in.tar (write_mixed_archive) into dir/out.
RunOptions mixed_run(const std::string& dir, int size, int per_file, int seed, int threads, const std::string& out) {
  RunOptions o;
  o.inputs = {dir + "/in.tar"};
  o.size = size;
  o.per_file = per_file;
  o.seed = uint64_t(seed);
  o.threads = threads;
  o.output = dir + "/" + out;
  return o;
}

struct Config {
  const char* name;
  int size, channels;
  ResizePolicy policy;
  Encoding encoding;
};

TEST(GpuDatagen, GpuResizeRunIsByteIdenticalToTheCpuRun) {
  const std::string dir = scratch("gpu_vs_cpu");
  write_mixed_archive(dir + "/in.tar");
  const Config configs[] = {
      {"rgb_crop_raw", 64, 3, ResizePolicy::crop, Encoding::raw},
      {"gray_squash_raw", 37, 1, ResizePolicy::squash, Encoding::raw},
      {"rgb_squash_jpeg", 96, 3, ResizePolicy::squash, Encoding::jpeg},
      {"rgb_crop_large", 300, 3, ResizePolicy::crop, Encoding::raw},
  };
  for (const Config& c : configs) {
    RunOptions o = mixed_run(dir, c.size, 5, 11, 2, std::string(c.name) + "_cpu");
    o.channels = c.channels;
    o.resize = c.policy;
    o.encoding = c.encoding;
    ASSERT_EQ(run_datagen(o, mpi()), 0) << c.name;
    for (int threads : {1, 3, 8}) {
      RunOptions g = o;
      g.gpu_resize = true;
      g.gpu_always = true;  // every image through the GPU, so the kernels are what is compared
      g.threads = threads;
      g.output = dir + "/" + c.name + "_gpu" + std::to_string(threads);
      ASSERT_EQ(run_datagen(g, mpi()), 0) << c.name;
      const auto names = batch_files(o.output);
      ASSERT_EQ(names.size(), 5u) << c.name;  // 22 planned samples, 5 per file
      ASSERT_EQ(names, batch_files(g.output));
      for (const auto& n : names)
        EXPECT_EQ(read_file(o.output + "/" + n), read_file(g.output + "/" + n)) << c.name << " " << n;
      EXPECT_EQ(read_file(o.output + "/rejects.tsv"), read_file(g.output + "/rejects.tsv")) << c.name;
      EXPECT_EQ(read_file(o.output + "/mean_image.png"), read_file(g.output + "/mean_image.png")) << c.name;
      auto a = to_json(read_dataset_meta(o.output)), b = to_json(read_dataset_meta(g.output));
      const auto timings = b["timings"];
      EXPECT_EQ(timings["gpu_resize"], true);
      EXPECT_GT(timings["phases"]["gpu_kernel"].get<double>(), 0.0) << c.name;
      EXPECT_GT(timings["phases"]["gpu_upload"].get<double>(), 0.0) << c.name;
      EXPECT_GT(timings["phases"]["gpu_download"].get<double>(), 0.0) << c.name;
      EXPECT_TRUE(timings["phases"].contains("gpu_stage"));
      EXPECT_TRUE(timings["phases"].contains("gpu_wait"));
      EXPECT_FALSE(a["timings"]["phases"].contains("gpu_kernel"));
      a.erase("timings"), b.erase("timings");
      EXPECT_EQ(a, b) << c.name;
    }
  }
}

// The default routing mixes the paths image by image (the CPU first, the GPU once it is ready and
// cheaper); the result is the same bytes, and every sample is counted on exactly one path.
TEST(GpuDatagen, RoutedRunIsByteIdenticalToTheCpuRun) {
  const std::string dir = scratch("gpu_routed");
  write_mixed_archive(dir + "/in.tar");
  const RunOptions o = mixed_run(dir, 64, 3, 5, 2, "cpu");
  ASSERT_EQ(run_datagen(o, mpi()), 0);
  RunOptions g = o;
  g.gpu_resize = true;
  g.gpu_min_saving = 0;  // the GPU starts at the first judgement, however little it can save
  g.output = dir + "/gpu";
  ASSERT_EQ(run_datagen(g, mpi()), 0);
  const auto names = batch_files(o.output);
  ASSERT_EQ(names, batch_files(g.output));
  for (const auto& n : names) EXPECT_EQ(read_file(o.output + "/" + n), read_file(g.output + "/" + n)) << n;
  const auto meta = to_json(read_dataset_meta(g.output));
  const auto& phases = meta["timings"]["phases"];
  EXPECT_EQ(phases["gpu_images"].get<double>() + phases["cpu_images"].get<double>(), meta["num_samples"].get<double>());
  EXPECT_GE(phases["cpu_images"].get<double>(), 1.0);  // those before the judgement that started the GPU

  // With the default threshold this small run never starts the GPU: every image on the CPU.
  g.gpu_min_saving = RunOptions().gpu_min_saving;
  g.output = dir + "/gpu_default";
  ASSERT_EQ(run_datagen(g, mpi()), 0);
  for (const auto& n : names) EXPECT_EQ(read_file(o.output + "/" + n), read_file(g.output + "/" + n)) << n;
  const auto def = to_json(read_dataset_meta(g.output))["timings"]["phases"];
  EXPECT_EQ(def["gpu_images"].get<double>(), 0.0);
  EXPECT_EQ(def["cpu_images"].get<double>(), meta["num_samples"].get<double>());
}

// One sample per file and more threads than files in memory: files wait on samples that other
// threads' lanes hold, and threads flush their lanes before they block on the queue or the writer.
TEST(GpuDatagen, OneSamplePerFileOnManyThreadsNeitherStallsNorDiffers) {
  const std::string dir = scratch("gpu_per_file_1");
  write_mixed_archive(dir + "/in.tar");
  for (int per_file : {1, 2}) {
    const RunOptions c = mixed_run(dir, 48, per_file, 3, 1, "cpu" + std::to_string(per_file));
    RunOptions g = mixed_run(dir, 48, per_file, 3, 6, "gpu" + std::to_string(per_file));
    g.gpu_resize = true;
    g.gpu_always = true;
    ASSERT_EQ(run_datagen(c, mpi()), 0);
    ASSERT_EQ(run_datagen(g, mpi()), 0);
    const auto names = batch_files(c.output);
    ASSERT_EQ(names, batch_files(g.output));
    for (const auto& n : names) EXPECT_EQ(read_file(c.output + "/" + n), read_file(g.output + "/" + n)) << n;
    auto a = to_json(read_dataset_meta(c.output)), b = to_json(read_dataset_meta(g.output));
    EXPECT_GT(b["timings"]["phases"]["gpu_images"].get<double>(), 0.0);
    a.erase("timings"), b.erase("timings");
    EXPECT_EQ(a, b);
  }
}

// Two images per batch: the lane must switch resizers, and deliver each sample (and not the one
// whose decode failed after it was staged) to its own slot, equal to resize_to_square.
TEST(GpuDatagen, LaneAlternatesResizersAndDeliversEverySlot) {
  GpuResizeOptions o;
  o.size = 48;
  o.policy = ResizePolicy::crop;
  o.channels = 3;
  o.max_images = 2;
  GpuLane lane(o);
  std::mt19937 rng(3);
  std::vector<cv::Mat> images;
  for (int i = 0; i < 9; ++i) {
    cv::Mat m(20 + int(rng() % 300), 20 + int(rng() % 300), CV_8UC3);
    cv::randu(m, 0, 256);
    images.push_back(m);
  }
  std::map<size_t, std::vector<uint8_t>> got;
  const GpuLane::Deliver deliver = [&](size_t slot, const uint8_t* px) {
    EXPECT_EQ(got.count(slot), 0u) << "slot " << slot << " delivered twice";
    got[slot].assign(px, px + 48 * 48 * 3);
  };
  for (size_t i = 0; i < images.size(); ++i) {
    const cv::Mat& m = images[i];
    if (i % 2 == 0) {
      lane.add(m.data, m.step[0], m.cols, m.rows, i, deliver);
    } else {
      uint8_t* p = lane.stage(m.cols, m.rows, i, deliver);
      for (int y = 0; y < m.rows; ++y)
        std::copy(m.ptr<uint8_t>(y), m.ptr<uint8_t>(y) + m.cols * 3, p + size_t(y) * m.cols * 3);
    }
    if (i == 5) lane.drop_last();
  }
  lane.drain(deliver);
  EXPECT_EQ(got.size(), images.size() - 1);
  EXPECT_EQ(got.count(5), 0u);
  std::vector<uint8_t> ref(48 * 48 * 3);
  for (const auto& [slot, px] : got) {
    resize_to_square(images[slot], 48, ResizePolicy::crop, ref.data());
    EXPECT_EQ(px, ref) << "slot " << slot;
  }
  const GpuResizeTimes t = lane.times();
  EXPECT_EQ(t.images, images.size());
  EXPECT_EQ(t.batches, 5u);
  EXPECT_GT(t.stage_s, 0.0);
}

}  // namespace
