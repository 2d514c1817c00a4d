// The loader on whole images at their own sizes (batch-file format v2): torchvision's
// RandomResizedCrop region arithmetic against hand values (and its fallback), the evaluation
// transform (short side to eval_resize, centre crop) against its direct computation, training
// crops equal to their definition on each stored image, JPEG files read alike by any readers,
// and the refusal of a dataset without crop.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "datagen/run.h"
#include "input/augment.h"
#include "input/loader.h"
#include "shared/batch_file.h"
#include "shared/counter_rng.h"
#include "shared/dataset_meta.h"
#include "shared/error.h"
#include "shared/resize.h"
#include "test_datagen_fixtures.h"

using namespace convoy;
using namespace fixtures;

namespace {

// Portrait, landscape and square photographs, several of each, made into a v2 dataset.
std::string whole_dataset(const std::string& name, Encoding encoding) {
  const std::string dir = scratch("loader_whole_" + name);
  Members m;
  const int sizes[][2] = {{40, 64}, {64, 40}, {48, 48}, {30, 90}, {72, 54}, {50, 35}};
  for (int k = 0; k < 18; ++k)
    m.push_back({"c" + std::to_string(k % 3) + "/i" + std::to_string(k) + ".jpg",
                 rgb_jpeg(sizes[k % 6][0], sizes[k % 6][1], 11 + k)});
  write_tar(dir + "/x.tar", m);
  datagen::RunOptions o;
  o.inputs = {dir + "/x.tar"};
  o.output = dir + "/ds";
  o.size = 32;
  o.max_side = 60;
  o.resize = ResizePolicy::short_side;
  o.encoding = encoding;
  o.per_file = 5;
  o.threads = 1;
  if (datagen::run_datagen(o, mpi()) != 0) throw Error("datagen failed");
  return o.output;
}

LoaderOptions options(const std::string& dir, bool train, const AugmentSpec& a, int readers = 2) {
  return loader_options(dir, 4, train, SampleOutput::raw, a, DataShare{0, 1, 9, 2}, readers, 2);
}

std::vector<HostBatch> epoch(Loader& l, int e) {
  l.start_epoch(e, 0);
  std::vector<HostBatch> out;
  HostBatch b;
  while (l.next(b)) out.push_back(b);
  return out;
}

// Every stored sample by id: its size and raw pixels.
struct Stored {
  ImageSize size;
  std::vector<uint8_t> px;
};
std::map<int64_t, Stored> stored_samples(const std::string& dir) {
  std::map<int64_t, Stored> out;
  const DatasetMeta meta = read_dataset_meta(dir);
  for (const auto& f : meta.files) {
    const Batch b = read_batch_file(join_path(dir, f.name));
    for (size_t i = 0; i < b.count(); ++i) {
      const ImageShape s = b.sample_shape(i);
      out[b.ids[i]] = {{int(s.height), int(s.width)}, {b.raw_image(i), b.raw_image(i) + s.bytes()}};
    }
  }
  return out;
}

}  // namespace

TEST(LoaderWhole, RandomResizedCropRegionsAreTorchvisionsForFixedDraws) {
  AugmentSpec a;  // scale [0.08, 1], ratio [3/4, 4/3]
  // 300 x 400, every draw 0.5: area 120000 x (0.08 + 0.5 x 0.92) = 64800, ratio exp(0) = 1,
  // sides round(sqrt(64800)) = 255, top int(0.5 x 46) = 23, left int(0.5 x 146) = 73.
  SampleCrop c = random_resized_region(a, 300, 400, [](int) { return 0.5; });
  EXPECT_EQ(c.height, 255);
  EXPECT_EQ(c.width, 255);
  EXPECT_EQ(c.top, 23);
  EXPECT_EQ(c.left, 73);
  // The first try too large (area 1, ratio 4/3 on 100 x 100: 115 x 87), the second fits: area
  // 10000 x (0.08 + 0.25 x 0.92) = 3100, ratio exp(log(3/4) + 0.75 x log(16/9)) = 1.1547,
  // w = round(sqrt(3100 x 1.1547)) = 60, h = round(sqrt(3100 / 1.1547)) = 52.
  const double second[] = {0.25, 0.75, 0.0, 0.999};
  c = random_resized_region(a, 100, 100, [&](int k) { return k < 4 ? (k == 0 ? 0.9999999 : 1.0) : second[k - 4]; });
  EXPECT_EQ(c.width, 60);
  EXPECT_EQ(c.height, 52);
  EXPECT_EQ(c.top, 0);
  EXPECT_EQ(c.left, 40);  // min(100 - 60, int(0.999 x 41))
  // Ten tries that never fit: the fallback, the whole image cut to the nearest allowed ratio.
  c = random_resized_region(a, 100, 400, [](int k) { return k % 4 < 2 ? 1.0 : 0.0; });  // 4:1
  EXPECT_EQ(c.height, 100);
  EXPECT_EQ(c.width, 133);  // round(100 x 4/3)
  EXPECT_EQ(c.top, 0);
  EXPECT_EQ(c.left, 133);                                                               // (400 - 133) / 2
  c = random_resized_region(a, 400, 100, [](int k) { return k % 4 < 2 ? 1.0 : 0.0; });  // 1:4
  EXPECT_EQ(c.width, 100);
  EXPECT_EQ(c.height, 133);  // round(100 / (3/4))
  EXPECT_EQ(c.top, 133);
  EXPECT_EQ(c.left, 0);
}

TEST(LoaderWhole, EvaluationIsTheShortSideToEvalResizeThenTheCentreCrop) {
  AugmentSpec a;
  a.crop = 16, a.eval_resize = 20;
  const Augmenter aug(ImageShape{0, 0, 3}, a, false, {0, 0, 0}, {1, 1, 1});
  // 32 x 48: the short side 32 -> 20 scales by 1.6; the centre 16 x 16 covers round(25.6) = 26.
  const SampleCrop c = aug.choose(1, 2, ImageSize{32, 48});
  EXPECT_EQ(c.height, 26);
  EXPECT_EQ(c.width, 26);
  EXPECT_EQ(c.top, 3);
  EXPECT_EQ(c.left, 11);

  const std::string dir = whole_dataset("eval", Encoding::raw);
  const DatasetMeta meta = read_dataset_meta(dir);
  a.crop = 24, a.eval_resize = 28;
  Loader l(options(dir, false, a), meta);
  const auto stored = stored_samples(dir);
  size_t seen = 0;
  std::vector<uint8_t> want(24 * 24 * 3);
  for (const HostBatch& b : epoch(l, 0))
    for (int i = 0; i < b.n; ++i, ++seen) {
      const Stored& s = stored.at(int64_t(b.keys[i]));
      // Computed here from the definition: the footprint of the centre crop of the image resized
      // to short side 28, resized from the stored pixels to 24 x 24.
      const double f = double(std::min(s.size.height, s.size.width)) / 28.0;
      const int h = std::min(s.size.height, int(std::lround(24 * f))),
                w = std::min(s.size.width, int(std::lround(24 * f)));
      const int top = (s.size.height - h) / 2, left = (s.size.width - w) / 2;
      const size_t stride = size_t(s.size.width) * 3;
      resize_to_square(PixelsIn{s.px.data() + top * stride + left * 3, w, h, 3, stride}, 24, ResizePolicy::squash,
                       want.data());
      ASSERT_TRUE(std::equal(want.begin(), want.end(), b.pixels.begin() + long(i) * 24 * 24 * 3))
          << "sample " << b.keys[i] << " of " << s.size.height << "x" << s.size.width;
    }
  EXPECT_EQ(seen, stored.size());
}

TEST(LoaderWhole, TrainingCropsComeFromEachWholeImage) {
  const std::string dir = whole_dataset("train", Encoding::raw);
  const DatasetMeta meta = read_dataset_meta(dir);
  const auto stored = stored_samples(dir);
  for (const bool rrc : {true, false}) {
    AugmentSpec a;
    a.crop = 24, a.flip = true, a.random_resized_crop = rrc;
    a.crop = rrc ? 24 : 36;  // a window larger than the 32-pixel short sides reaches into the padding
    const LoaderOptions o = options(dir, true, a);
    Loader l(o, meta);
    const Augmenter aug(meta.shape, a, true, meta.mean, meta.std);
    const uint64_t key = augment_epoch_key(o.share.seed, 0);
    const size_t out = size_t(a.crop) * a.crop * 3;
    std::vector<uint8_t> want(out);
    size_t seen = 0;
    for (const HostBatch& b : epoch(l, 0))
      for (int i = 0; i < b.n; ++i, ++seen) {
        const Stored& s = stored.at(int64_t(b.keys[i]));
        const SampleCrop c = aug.choose(key, int64_t(b.keys[i]), s.size);
        if (rrc)
          EXPECT_TRUE(c.top >= 0 && c.left >= 0 && c.top + c.height <= s.size.height &&
                      c.left + c.width <= s.size.width);
        const int W = s.size.width, H = s.size.height;
        aug.render(PixelView{s.px.data(), size_t(W) * 3, 3, PixelRect{0, 0, W, H}}, c, 1, s.size, want.data());
        EXPECT_EQ(b.flips[i], c.flip);
        ASSERT_TRUE(std::equal(want.begin(), want.end(), b.pixels.begin() + long(i * out))) << "sample " << b.keys[i];
      }
    EXPECT_EQ(seen, stored.size() / 4 * 4);
  }
}

TEST(LoaderWhole, JpegFilesGiveTheSameBatchesForAnyReaders) {
  const std::string dir = whole_dataset("jpeg", Encoding::jpeg);
  const DatasetMeta meta = read_dataset_meta(dir);
  AugmentSpec a;
  a.crop = 12, a.random_resized_crop = true, a.flip = true;  // small crops: DCT-scaled region decodes
  Loader one(options(dir, true, a, 1), meta), three(options(dir, true, a, 3), meta);
  const auto x = epoch(one, 1), y = epoch(three, 1);
  ASSERT_EQ(x.size(), 4u);
  ASSERT_EQ(x.size(), y.size());
  for (size_t k = 0; k < x.size(); ++k) {
    EXPECT_EQ(x[k].keys, y[k].keys);
    EXPECT_EQ(x[k].pixels, y[k].pixels);
    EXPECT_EQ(x[k].pixels.size(), size_t(4) * 12 * 12 * 3);
  }
}

TEST(LoaderWhole, WholeImagesWithoutCropAreRefusedNamingTheKey) {
  const std::string dir = whole_dataset("nocrop", Encoding::raw);
  const DatasetMeta meta = read_dataset_meta(dir);
  AugmentSpec a;
  try {
    Loader l(options(dir, true, a), meta);
    FAIL() << "accepted";
  } catch (const Error& e) {
    const std::string why = e.what();
    EXPECT_EQ(why.rfind("crop: the dataset holds whole images at their own sizes", 0), 0u) << why;
    EXPECT_EQ(why.find('\n'), std::string::npos);
  }
  EXPECT_THROW(load_batch_file(dir, meta, 0), Error);  // one array of one shape: not for these
}
