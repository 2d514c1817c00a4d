// The whole datagen run in one process: a mixed archive (nested tars, CMYK, gray, PNG named .JPEG,
// corrupt and empty members, a README), tar = tar.gz = folder, threads, a truncated archive,
// JPEG encoding and its statistics, resume after damage, refusal of another run's folder and of bad flags.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>

#include "datagen/dataset_tools.h"
#include "datagen/png_codec.h"
#include "datagen/run.h"
#include "sanitized.h"
#include "shared/batch_file.h"
#include "shared/dataset_meta.h"
#include "shared/error.h"
#include "shared/mpi_context.h"
#include "test_datagen_fixtures.h"

using namespace convoy;
using namespace convoy::datagen;
using namespace fixtures;

namespace {

RunOptions options(const std::vector<std::string>& inputs, const std::string& out) {
  RunOptions o;
  o.inputs = inputs;
  o.output = out;
  o.size = 16;
  o.channels = 3;
  o.per_file = 4;
  o.seed = 3;
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

void expect_same_batches(const std::string& a, const std::string& b) {
  const auto names = batch_files(a);
  ASSERT_FALSE(names.empty());
  ASSERT_EQ(names, batch_files(b));
  for (const auto& n : names) EXPECT_EQ(read_file(a + "/" + n), read_file(b + "/" + n)) << n;
}

Members class_members(int cls, int n) {
  Members m;
  for (int i = 0; i < n; ++i)
    m.push_back({"img_" + std::to_string(i) + ".jpg", rgb_jpeg(24 + 4 * i, 20 + cls, cls * 10 + i)});
  return m;
}

// Noisy photographs' stand-in: a lossy encoding changes them, so statistics of the decoded JPEG
// samples would differ from those of the pixels they were encoded from.
Members noisy_members(int cls, int n, int side) {
  Members m;
  std::mt19937 rng(uint32_t(cls * 100 + 1));
  for (int i = 0; i < n; ++i) {
    std::vector<uint8_t> px(size_t(side) * size_t(side) * 3);
    for (auto& v : px) v = uint8_t(rng() % 256);
    m.push_back({"c" + std::to_string(cls) + "/n_" + std::to_string(i) + ".jpg", jpeg(px, side, side)});
  }
  return m;
}

}  // namespace

TEST(DatagenRun, MixedArchiveKeepsGoodSamplesAndListsRejects) {
  const std::string dir = scratch("run_mixed");
  cv::Mat deep(30, 20, CV_16UC3, cv::Scalar(1000, 30000, 60000));
  write_tar(dir + "/a.tar", {{"rgb.JPEG", rgb_jpeg(40, 30, 1)},
                             {"gray.JPEG", gray_jpeg(25, 25, 90)},
                             {"cmyk.JPEG", cmyk_jpeg(20, 20, 255, 0, 0, 255)},
                             {"really_a_png.JPEG", png(cv::Mat(18, 18, CV_8UC3, cv::Scalar(1, 2, 3)))},
                             {"progressive.JPEG", rgb_jpeg(33, 44, 2, TJSAMP_444, TJFLAG_PROGRESSIVE)}});
  write_tar(dir + "/b.tar", {{"corrupt.JPEG", "\xFF\xD8\xFF\xE0garbage garbage garbage"},
                             {"empty.JPEG", ""},
                             {"deep.png", png(deep)},
                             {"palette.png", palette_png(20, 20)},
                             {"ok.jpg", rgb_jpeg(50, 17, 3)}});
  write_tar(dir + "/in.tar",
            {{"README", "not an image"}, {"a.tar", read_file(dir + "/a.tar")}, {"b.tar", read_file(dir + "/b.tar")}});
  ASSERT_EQ(run_datagen(options({dir + "/in.tar"}, dir + "/out"), mpi()), 0);
  const DatasetMeta m = read_dataset_meta(dir + "/out");
  EXPECT_EQ(m.num_samples, 8u);
  EXPECT_EQ(m.classes, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(m.class_counts, (std::vector<uint64_t>{5, 3}));
  EXPECT_EQ(m.rejected, 2u);
  EXPECT_EQ(m.skipped, 1u);
  EXPECT_EQ(m.files.size(), 3u);  // 10 planned samples, 4 per file
  EXPECT_TRUE(verify_dataset(dir + "/out").empty());
  const std::string rejects = read_file(dir + "/out/rejects.tsv");
  EXPECT_NE(rejects.find("b.tar/corrupt.JPEG\t"), std::string::npos) << rejects;
  EXPECT_NE(rejects.find("b.tar/empty.JPEG\tempty member"), std::string::npos) << rejects;
  EXPECT_TRUE(file_exists(dir + "/out/index.tsv"));
  ASSERT_EQ(m.mean_image, "mean_image.png");
  const std::string mean_png = read_file(dir + "/out/mean_image.png");
  const cv::Mat mean = png_decode(reinterpret_cast<const uint8_t*>(mean_png.data()), mean_png.size());
  EXPECT_EQ(mean.size(), cv::Size(16, 16));
  EXPECT_EQ(mean.channels(), 3);
}

TEST(DatagenRun, TarGzFolderAndThreadCountsGiveTheSameBatchFiles) {
  const std::string dir = scratch("run_same");
  Members all;
  for (int c = 0; c < 3; ++c)
    for (auto& [name, data] : class_members(c, 5)) {
      all.push_back({"c" + std::to_string(c) + "/" + name, data});
      write_file(dir + "/folder/c" + std::to_string(c) + "/" + name, data);
    }
  write_tar(dir + "/x.tar", all);
  write_tar(dir + "/x.tar.gz", all, "gzip");
  ASSERT_EQ(run_datagen(options({dir + "/x.tar"}, dir + "/tar"), mpi()), 0);
  ASSERT_EQ(run_datagen(options({dir + "/x.tar.gz"}, dir + "/gz"), mpi()), 0);
  ASSERT_EQ(run_datagen(options({dir + "/folder"}, dir + "/dir"), mpi()), 0);
  RunOptions one = options({dir + "/x.tar"}, dir + "/t1");
  one.threads = 1;
  ASSERT_EQ(run_datagen(one, mpi()), 0);
  expect_same_batches(dir + "/tar", dir + "/gz");
  expect_same_batches(dir + "/tar", dir + "/dir");
  expect_same_batches(dir + "/tar", dir + "/t1");
  // Neither the writers nor the files held in memory are part of what is made.
  RunOptions held = options({dir + "/x.tar"}, dir + "/held");
  held.threads = 3, held.writers = 1, held.files_in_memory = 2;
  ASSERT_EQ(run_datagen(held, mpi()), 0);
  expect_same_batches(dir + "/tar", dir + "/held");
  auto a = to_json(read_dataset_meta(dir + "/tar")), b = to_json(read_dataset_meta(dir + "/t1"));
  a.erase("timings"), b.erase("timings");
  EXPECT_EQ(a, b);
  // Another seed shuffles differently.
  RunOptions other = options({dir + "/x.tar"}, dir + "/seed9");
  other.seed = 9;
  ASSERT_EQ(run_datagen(other, mpi()), 0);
  EXPECT_NE(read_file(dir + "/tar/batch_00000.cvb"), read_file(dir + "/seed9/batch_00000.cvb"));
}

TEST(DatagenRun, TruncatedArchiveKeepsWhatCameBeforeAndExitsTwo) {
  const std::string dir = scratch("run_trunc");
  Members all;
  for (auto& [name, data] : class_members(0, 6)) all.push_back({"k/" + name, data});
  write_tar(dir + "/x.tar", all);
  const Bytes full = read_file(dir + "/x.tar");
  write_file(dir + "/cut.tar", full.substr(0, full.size() - 1500));
  ASSERT_EQ(run_datagen(options({dir + "/cut.tar"}, dir + "/out"), mpi()), 2);
  const DatasetMeta m = read_dataset_meta(dir + "/out");
  EXPECT_GE(m.num_samples, 4u);
  EXPECT_LT(m.num_samples, 6u);
  EXPECT_TRUE(verify_dataset(dir + "/out").empty());
}

TEST(DatagenRun, JpegEncodingIsVerifiedAndDecodable) {
  const std::string dir = scratch("run_jpeg");
  Members all;
  for (int c = 0; c < 2; ++c)
    for (auto& [name, data] : class_members(c, 4)) all.push_back({"c" + std::to_string(c) + "/" + name, data});
  write_tar(dir + "/x.tar", all);
  RunOptions o = options({dir + "/x.tar"}, dir + "/out");
  o.encoding = Encoding::jpeg;
  o.quality = 85;
  ASSERT_EQ(run_datagen(o, mpi()), 0);
  EXPECT_TRUE(verify_dataset(dir + "/out").empty());
  const Batch b = read_batch_file(dir + "/out/batch_00000.cvb");
  EXPECT_EQ(b.encoding, Encoding::jpeg);
  ASSERT_EQ(b.offsets.size(), b.count() + 1);
  ImageCodec codec;
  cv::Mat img = codec.decode(b.images.data() + b.offsets[1], size_t(b.offsets[2] - b.offsets[1]), 3, 0, {});
  EXPECT_EQ(img.size(), cv::Size(16, 16));
  // Resume of a JPEG dataset keeps its files and gives the same dataset.json.
  auto before = to_json(read_dataset_meta(dir + "/out"));
  ASSERT_EQ(run_datagen(o, mpi()), 0);
  auto after = to_json(read_dataset_meta(dir + "/out"));
  EXPECT_EQ(after["timings"]["kept_files"], 2);
  before.erase("timings"), after.erase("timings");
  EXPECT_EQ(before, after);
}

TEST(DatagenRun, JpegStatisticsAreTheResizedPixelsNotASecondDecode) {
  // The samples are as large as their sources, so a second decode of each encoded sample would
  // cost about as much as the first; enough of them that the stats phase's share is not noise.
  const std::string dir = scratch("run_jpeg_stats");
  Members all;
  for (int c = 0; c < 2; ++c)
    for (auto& m : noisy_members(c, 100, 256)) all.push_back(m);
  write_tar(dir + "/x.tar", all);
  RunOptions o = options({dir + "/x.tar"}, dir + "/raw");
  o.size = 256;
  o.per_file = 64;
  ASSERT_EQ(run_datagen(o, mpi()), 0);
  o.output = dir + "/jpeg";
  o.encoding = Encoding::jpeg;
  o.quality = 75;
  ASSERT_EQ(run_datagen(o, mpi()), 0);
  const DatasetMeta raw = read_dataset_meta(dir + "/raw"), jpg = read_dataset_meta(dir + "/jpeg");
  // The same resized pixels, before JPEG encoding, make both datasets' statistics.
  EXPECT_EQ(raw.mean, jpg.mean);
  EXPECT_EQ(raw.std, jpg.std);
  EXPECT_TRUE(read_file(dir + "/raw/mean_image.png") == read_file(dir + "/jpeg/mean_image.png"))
      << "mean images differ";
  const auto phases = to_json(jpg)["timings"]["phases"];
  const double stats = phases["stats"], decode = phases["decode"];
  EXPECT_GT(decode, 0.0);
#ifndef CONVOY_TEST_SANITIZED  // instrumented sums against an uninstrumented libjpeg say nothing
  EXPECT_LT(stats, 0.5 * decode) << "stats " << stats << " s against decode " << decode << " s";
#endif
  // A resume keeps the JPEG files, and takes their statistics from the same pixels again.
  std::filesystem::remove(dir + "/jpeg/dataset.json");
  std::filesystem::remove(dir + "/jpeg/" + batch_files(dir + "/jpeg")[1]);
  ASSERT_EQ(run_datagen(o, mpi()), 0);
  const DatasetMeta resumed = read_dataset_meta(dir + "/jpeg");
  EXPECT_EQ(to_json(resumed)["timings"]["kept_files"], 3);
  EXPECT_EQ(resumed.mean, raw.mean);
  EXPECT_EQ(resumed.std, raw.std);
}

TEST(DatagenRun, ResumeRedoesOnlyDamagedFilesAndEndsIdentical) {
  const std::string dir = scratch("run_resume");
  Members all;
  for (int c = 0; c < 3; ++c)
    for (auto& [name, data] : class_members(c, 6)) all.push_back({"c" + std::to_string(c) + "/" + name, data});
  all.push_back({"c0/bad.jpg", "\xFF\xD8\xFF junk"});
  write_tar(dir + "/x.tar", all);
  const RunOptions o = options({dir + "/x.tar"}, dir + "/out");
  ASSERT_EQ(run_datagen(o, mpi()), 0);
  ASSERT_EQ(run_datagen(options({dir + "/x.tar"}, dir + "/ref"), mpi()), 0);
  const auto names = batch_files(dir + "/out");
  ASSERT_EQ(names.size(), 5u);
  std::filesystem::remove(dir + "/out/" + names[1]);
  {
    std::fstream f(dir + "/out/" + names[2], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(300);
    f.put('\x7f');
  }
  std::filesystem::remove(dir + "/out/dataset.json");
  write_file(dir + "/out/" + names[3] + ".tmp.99999", "left by a killed run");
  ASSERT_EQ(run_datagen(o, mpi()), 0);
  expect_same_batches(dir + "/ref", dir + "/out");
  EXPECT_FALSE(file_exists(dir + "/out/" + names[3] + ".tmp.99999"));
  auto a = to_json(read_dataset_meta(dir + "/ref")), b = to_json(read_dataset_meta(dir + "/out"));
  EXPECT_EQ(b["timings"]["kept_files"], 3);
  a.erase("timings"), b.erase("timings");
  EXPECT_EQ(a, b);
  EXPECT_EQ(read_file(dir + "/ref/rejects.tsv"), read_file(dir + "/out/rejects.tsv"));

  // A newer time stamp on the input makes the rerun scan again instead of reusing index.tsv;
  // the contents are the same, so the folder is still this run's and the result is unchanged.
  const auto run_json = read_file(dir + "/out/datagen_run.json");
  std::filesystem::last_write_time(dir + "/x.tar",
                                   std::filesystem::file_time_type::clock::now() + std::chrono::hours(1));
  std::filesystem::remove(dir + "/out/" + names[0]);
  ASSERT_EQ(run_datagen(o, mpi()), 0);
  expect_same_batches(dir + "/ref", dir + "/out");
  EXPECT_NE(read_file(dir + "/out/datagen_run.json"), run_json);  // new stamps recorded
  // A damaged index.tsv is never reused.
  write_file(dir + "/out/index.tsv", "convoy-index\t1\n");
  std::filesystem::remove(dir + "/out/" + names[4]);
  ASSERT_EQ(run_datagen(o, mpi()), 0);
  expect_same_batches(dir + "/ref", dir + "/out");
}

TEST(DatagenRun, AnotherRunsFolderIsRefused) {
  const std::string dir = scratch("run_other");
  write_tar(dir + "/x.tar", {{"a/1.jpg", rgb_jpeg(20, 20, 1)}, {"b/2.jpg", rgb_jpeg(20, 20, 2)}});
  ASSERT_EQ(run_datagen(options({dir + "/x.tar"}, dir + "/out"), mpi()), 0);
  RunOptions bigger = options({dir + "/x.tar"}, dir + "/out");
  bigger.size = 20;
  try {
    run_datagen(bigger, mpi());
    FAIL() << "a folder made with other options must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("different datagen run"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_dataset_meta(dir + "/out").shape.height, 16u);  // nothing good is lost
}

TEST(DatagenRun, LabelFileWithTrainClasses) {
  const std::string dir = scratch("run_labels");
  write_tar(dir + "/train.tar", {{"dog/1.jpg", rgb_jpeg(20, 20, 1)}, {"cat/2.jpg", rgb_jpeg(20, 20, 2)}});
  ASSERT_EQ(run_datagen(options({dir + "/train.tar"}, dir + "/train"), mpi()), 0);
  write_dataset_classes(dir + "/train", dir + "/classes.txt");
  EXPECT_EQ(read_file(dir + "/classes.txt"), "cat\ndog\n");
  write_tar(dir + "/val.tar",
            {{"v1.JPEG", rgb_jpeg(20, 20, 3)}, {"v2.JPEG", rgb_jpeg(20, 20, 4)}, {"v3.JPEG", rgb_jpeg(20, 20, 5)}});
  write_file(dir + "/val.txt", "v1.JPEG dog\nv2.JPEG cat\nv3.JPEG dog\n");
  RunOptions o = options({dir + "/val.tar"}, dir + "/val");
  o.labels_file = dir + "/val.txt";
  o.classes_file = dir + "/classes.txt";
  o.per_file = 10;
  ASSERT_EQ(run_datagen(o, mpi()), 0);
  const DatasetMeta m = read_dataset_meta(dir + "/val");
  EXPECT_EQ(m.classes, (std::vector<std::string>{"cat", "dog"}));
  EXPECT_EQ(m.class_counts, (std::vector<uint64_t>{1, 2}));
}

TEST(DatagenRun, BadFlagsAreRefusedBeforeAnyWork) {
  const std::string dir = scratch("run_flags");
  write_tar(dir + "/x.tar", {{"a/1.jpg", rgb_jpeg(20, 20, 1)}});
  auto refused = [&](const RunOptions& o, const std::string& words) {
    try {
      validate_run_options(o);
      ADD_FAILURE() << "accepted: " << words;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  RunOptions o = options({dir + "/x.tar"}, dir + "/out");
  RunOptions t = o;
  t.size = 0;
  refused(t, "--size");
  t = o, t.channels = 4;
  refused(t, "--channels");
  t = o, t.resize = ResizePolicy::short_side, t.gpu_resize = true;
  refused(t, "--gpu-resize");
  t = o, t.max_side = 64;
  refused(t, "--max-side applies to --resize short:S only");
  t = o, t.resize = ResizePolicy::short_side, t.max_side = 8;
  refused(t, "--max-side must be between the short side 16");
  t = o, t.encoding = Encoding::jpeg, t.quality = 0;
  refused(t, "--quality");
  t = o, t.inputs = {dir + "/missing.tar"};
  refused(t, "missing.tar");
  t = o, t.classes_file = dir + "/nope.txt";
  refused(t, "nope.txt");
  t = o, t.output = dir + "/x.tar";
  refused(t, "not a folder");
  t = o, t.inputs = {};
  refused(t, "--input");
  t = o, t.writers = -1;
  refused(t, "--writers");
  t = o, t.files_in_memory = -2;
  refused(t, "--files-in-memory");
  t = o, t.size = 4096, t.per_file = 1024;
  refused(t, "smaller --per-file");
  EXPECT_FALSE(file_exists(dir + "/out"));
}
