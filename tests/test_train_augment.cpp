// The loader's augmentation: the partial JPEG decode against a full decode then crop (byte for
// byte, also DCT-scaled), RandomResizedCrop against torchvision's definition (area and aspect
// distributions), the evaluation transform, the same crops for any readers and ranks, and a
// damaged JPEG sample refused with its file and sample.
#include <gtest/gtest.h>

#include <turbojpeg.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "input/augment.h"
#include "input/loader.h"
#include "sanitized.h"
#include "shared/atomic_file.h"
#include "shared/batch_file.h"
#include "shared/dataset_meta.h"
#include "shared/error.h"
#include "shared/jpeg_region.h"
#include "train/layers/dropout.h"
#include "train/synthetic_data.h"

using namespace convoy;

namespace {

const std::string kTmp = std::string(CONVOY_TEST_TMP) + "/augment";

struct Tj {
  tjhandle h;
  explicit Tj(bool compress) : h(compress ? tjInitCompress() : tjInitDecompress()) {}
  ~Tj() { tjDestroy(h); }
};

// A smooth picture with edges and noise, so that every DCT coefficient and the chroma matter.
std::vector<uint8_t> picture(int w, int h, int c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> px(size_t(w) * h * c);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < c; ++k) {
        const double v = 128 + 90 * std::sin(0.05 * x * (k + 1) + 0.031 * y) + ((x / 13 + y / 7) % 2 ? 30 : -30);
        px[(size_t(y) * w + x) * c + k] = uint8_t(std::clamp(v + double(rng() % 21) - 10, 0.0, 255.0));
      }
  return px;
}

std::vector<uint8_t> encode(const std::vector<uint8_t>& px, int w, int h, int c, int samp) {
  Tj tj(true);
  unsigned char* out = nullptr;
  unsigned long size = 0;
  EXPECT_EQ(tjCompress2(tj.h, px.data(), w, 0, h, c == 1 ? TJPF_GRAY : TJPF_RGB, &out, &size, samp, 90, 0), 0);
  std::vector<uint8_t> j(out, out + size);
  tjFree(out);
  return j;
}

// TurboJPEG's plain decode of the whole image at 1/scale.
std::vector<uint8_t> full_decode(const std::vector<uint8_t>& jpeg, int w, int h, int c, int scale) {
  Tj tj(false);
  const int sw = scaled_length(w, scale), sh = scaled_length(h, scale);
  std::vector<uint8_t> out(size_t(sw) * sh * c);
  EXPECT_EQ(tjDecompress2(tj.h, jpeg.data(), jpeg.size(), out.data(), sw, 0, sh, c == 1 ? TJPF_GRAY : TJPF_RGB,
                          TJFLAG_ACCURATEDCT),
            0)
      << tjGetErrorStr2(tj.h);
  return out;
}

// Largest distance between the empirical distribution functions of two samples.
double ks_distance(std::vector<double> a, std::vector<double> b) {
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  double d = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const double v = std::min(a[i], b[j]);
    while (i < a.size() && a[i] <= v) ++i;
    while (j < b.size() && b[j] <= v) ++j;
    d = std::max(d, std::fabs(double(i) / a.size() - double(j) / b.size()));
  }
  return d;
}

// torchvision.transforms.RandomResizedCrop.get_params, written from its definition with its own
// random numbers: (top, left, height, width).
SampleCrop torchvision_rrc(int H, int W, const double scale[2], const double ratio[2], std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(0, 1);
  const double area = double(H) * W;
  for (int t = 0; t < 10; ++t) {
    const double target = area * (scale[0] + u(rng) * (scale[1] - scale[0]));
    const double ar = std::exp(std::log(ratio[0]) + u(rng) * (std::log(ratio[1]) - std::log(ratio[0])));
    const int w = int(std::lround(std::sqrt(target * ar))), h = int(std::lround(std::sqrt(target / ar)));
    if (0 < w && w <= W && 0 < h && h <= H) {
      const int i = std::uniform_int_distribution<int>(0, H - h)(rng),
                j = std::uniform_int_distribution<int>(0, W - w)(rng);
      return SampleCrop{i, j, h, w, false};
    }
  }
  const double in_ratio = double(W) / H;
  int w = W, h = H;
  if (in_ratio < ratio[0])
    h = int(std::lround(W / ratio[0]));
  else if (in_ratio > ratio[1])
    w = int(std::lround(H * ratio[1]));
  return SampleCrop{(H - h) / 2, (W - w) / 2, h, w, false};
}

std::string jpeg_dataset(const std::string& name, std::vector<uint32_t> counts, uint32_t size) {
  SyntheticSpec spec;
  spec.file_counts = counts;
  spec.shape = {size, size, 3};
  spec.classes = 4;
  spec.encoding = Encoding::jpeg;
  spec.seed = 5;
  const std::string dir = kTmp + "/" + name;
  write_synthetic_dataset(dir, spec);
  return dir;
}

// Every sample's augmented pixels in one epoch, by dataset id, over all ranks.
std::map<uint64_t, std::vector<uint8_t>> by_id(const std::string& dir, const AugmentSpec& a, int readers, int ranks) {
  const DatasetMeta meta = read_dataset_meta(dir);
  std::map<uint64_t, std::vector<uint8_t>> out;
  for (int r = 0; r < ranks; ++r) {
    Loader l(loader_options(dir, 6, true, SampleOutput::raw, a, DataShare{r, ranks, 9, 2}, readers, 0), meta);
    l.start_epoch(2);
    HostBatch b;
    const size_t per = l.sample_format().bytes();
    while (l.next(b))
      for (int i = 0; i < b.n; ++i) {
        auto& px = out[b.keys[i]];
        EXPECT_TRUE(px.empty()) << "sample " << b.keys[i] << " twice";
        px.assign(b.pixels.begin() + i * per, b.pixels.begin() + (i + 1) * per);
        px.push_back(b.flips[i]);
      }
  }
  return out;
}

}  // namespace

TEST(JpegRegion, PartialDecodeEqualsFullDecodeThenCrop) {
  // Regions anywhere (iMCU edges and not, touching every border), on 4:2:0, 4:2:2, 4:4:4 and grey
  // images whose sides are not whole MCUs, at scale 1 and DCT-scaled: the bytes of TurboJPEG's
  // full decode at that scale, cut to the region.
  std::mt19937 rng(7);
  JpegRegionDecoder dec;
  for (auto [w, h, c, samp] : {std::tuple{77, 61, 3, TJSAMP_420},
                               {256, 256, 3, TJSAMP_420},
                               {120, 90, 3, TJSAMP_422},
                               {53, 70, 3, TJSAMP_444},
                               {66, 45, 1, TJSAMP_GRAY}}) {
    const std::vector<uint8_t> jpeg = encode(picture(w, h, c, uint32_t(w * h)), w, h, c, samp);
    for (int scale : {1, 2, 4, 8}) {
      const std::vector<uint8_t> full = full_decode(jpeg, w, h, c, scale);
      const int sw = scaled_length(w, scale), sh = scaled_length(h, scale);
      for (int t = 0; t < 60; ++t) {
        PixelRect r;
        r.x = int(rng() % sw), r.y = int(rng() % sh);
        r.w = 1 + int(rng() % (sw - r.x)), r.h = 1 + int(rng() % (sh - r.y));
        if (t == 0) r = PixelRect{0, 0, sw, sh};
        if (t == 1) r = PixelRect{sw - 1, sh - 1, 1, 1};
        const PixelView v = dec.decode(jpeg.data(), jpeg.size(), w, h, c, scale, r);
        for (int y = 0; y < r.h; ++y)
          ASSERT_EQ(0, std::memcmp(v.data + size_t(y) * v.stride, full.data() + (size_t(r.y + y) * sw + r.x) * c,
                                   size_t(r.w) * c))
              << w << "x" << h << "x" << c << " subsampling " << samp << " scale 1/" << scale << " region " << r.x
              << "," << r.y << " " << r.w << "x" << r.h << " row " << y;
      }
    }
  }
}

TEST(JpegRegion, RefusesDamagedAndMismatchedImages) {
  const std::vector<uint8_t> jpeg = encode(picture(64, 48, 3, 1), 64, 48, 3, TJSAMP_420);
  JpegRegionDecoder dec;
  const PixelRect all{0, 0, 64, 48};
  try {
    dec.decode(jpeg.data(), jpeg.size(), 64, 40, 3, 1, all);
    ADD_FAILURE() << "a 64x48 JPEG was taken for 64x40";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "JPEG is 64x48, dataset.json says 64x40");
  }
  std::vector<uint8_t> cut(jpeg.begin(), jpeg.begin() + jpeg.size() / 2);
  EXPECT_THROW(dec.decode(cut.data(), cut.size(), 64, 48, 3, 1, all), Error);
  std::vector<uint8_t> bad = jpeg;
  bad[0] = 0;
  EXPECT_THROW(dec.decode(bad.data(), bad.size(), 64, 48, 3, 1, all), Error);
  // The decoder is fine afterwards.
  const PixelView v = dec.decode(jpeg.data(), jpeg.size(), 64, 48, 3, 1, all);
  EXPECT_EQ(0, std::memcmp(v.data, full_decode(jpeg, 64, 48, 3, 1).data(), 64 * 3));
}

TEST(Augment, RandomResizedCropMatchesTorchvisionsDefinition) {
  // The area fraction and the aspect ratio of the regions drawn, against the same definition with
  // other random numbers: the distributions agree (Kolmogorov-Smirnov distance; 0.02 is about the
  // 0.1 % critical value for two samples of 20,000), and every region lies inside the image.
  const int n = 20000;
  for (auto [H, W, lo] : {std::tuple{256, 256, 0.08}, {375, 500, 0.08}, {60, 400, 0.08}, {256, 256, 0.5}}) {
    AugmentSpec a;
    a.crop = 32, a.random_resized_crop = true, a.flip = true, a.scale[0] = lo;
    const Augmenter aug(ImageShape{uint32_t(H), uint32_t(W), 3}, a, true, {0, 0, 0}, {1, 1, 1});
    std::mt19937_64 rng(3);
    std::vector<double> area[2], aspect[2];
    int flips = 0;
    for (int i = 0; i < n; ++i) {
      const SampleCrop c = aug.choose(0x1234, i), t = torchvision_rrc(H, W, a.scale, a.ratio, rng);
      ASSERT_TRUE(c.top >= 0 && c.left >= 0 && c.height > 0 && c.width > 0 && c.top + c.height <= H &&
                  c.left + c.width <= W);
      flips += c.flip;
      for (int k = 0; k < 2; ++k) {
        const SampleCrop& s = k ? t : c;
        area[k].push_back(double(s.height) * s.width / (double(H) * W));
        aspect[k].push_back(std::log(double(s.width) / s.height));
      }
    }
    EXPECT_LT(ks_distance(area[0], area[1]), 0.02) << H << "x" << W << " scale " << lo;
    EXPECT_LT(ks_distance(aspect[0], aspect[1]), 0.02) << H << "x" << W << " scale " << lo;
    EXPECT_NEAR(double(flips) / n, 0.5, 0.02);
  }
}

TEST(Augment, EvaluationTakesTheCentreOfTheResizedImage) {
  // eval_resize 256, crop 224: the short side to 256, then the centre 224, as one region of the
  // stored image resized once.
  AugmentSpec a;
  a.crop = 224, a.eval_resize = 256, a.random_resized_crop = true, a.flip = true;
  const Augmenter square(ImageShape{256, 256, 3}, a, false, {0, 0, 0}, {1, 1, 1});
  const SampleCrop s = square.choose(1, 2);
  EXPECT_EQ(s.top, 16);
  EXPECT_EQ(s.left, 16);
  EXPECT_EQ(s.height, 224);
  EXPECT_EQ(s.width, 224);
  EXPECT_FALSE(s.flip);
  const Augmenter wide(ImageShape{300, 400, 3}, a, false, {0, 0, 0}, {1, 1, 1});
  const SampleCrop w = wide.choose(1, 2);
  EXPECT_EQ(w.height, 263);  // 224 * 300 / 256
  EXPECT_EQ(w.width, 263);
  EXPECT_EQ(w.top, (300 - 263) / 2);
  EXPECT_EQ(w.left, (400 - 263) / 2);
  // A region twice the output or more is decoded smaller.
  EXPECT_EQ(wide.dct_scale(SampleCrop{0, 0, 300, 400, false}), 1);
  AugmentSpec b = a;
  b.crop = 64;
  const Augmenter small(ImageShape{300, 400, 3}, b, false, {0, 0, 0}, {1, 1, 1});
  EXPECT_EQ(small.dct_scale(SampleCrop{0, 0, 300, 400, false}), 4);
  EXPECT_EQ(small.dct_scale(SampleCrop{0, 0, 128, 300, false}), 2);
}

TEST(Augment, CropsAreTheSameForAnyReadersAndRanks) {
  // Fixed windows and RandomResizedCrop (DCT-scaled decodes among them) from JPEG batch files:
  // each sample's pixels depend on the seed, the epoch and the sample alone.
  const std::string dir = jpeg_dataset("readers", {13, 13, 13, 13, 13, 13}, 48);
  AugmentSpec window;
  window.crop = 40, window.pad = 3, window.flip = true;
  AugmentSpec rrc;
  rrc.crop = 16, rrc.random_resized_crop = true, rrc.flip = true;
  for (const AugmentSpec& a : {window, rrc}) {
    const auto want = by_id(dir, a, 1, 1);
    EXPECT_EQ(want.size(), 78u);
    for (int readers : {2, 3, 5}) EXPECT_EQ(by_id(dir, a, readers, 1), want) << readers << " readers";
    // With ranks, each sees its share (the steps are those every rank can fill).
    for (int ranks : {2, 3}) {
      const auto got = by_id(dir, a, 2, ranks);
      EXPECT_GT(got.size(), 40u);
      for (const auto& [id, px] : got) EXPECT_EQ(px, want.at(id)) << ranks << " ranks, sample " << id;
    }
  }
}

TEST(Augment, DamagedJpegSampleNamesFileAndSample) {
  // A sample whose JPEG is cut short, in a file whose checksums are right (damaged before it was
  // written): the batch that needs it fails with one line naming the file and the sample.
  const std::string dir = jpeg_dataset("damaged", {8}, 32);
  const DatasetMeta meta = read_dataset_meta(dir);
  const std::string path = join_path(dir, meta.files[0].name);
  Batch b = read_batch_file(path);
  ASSERT_EQ(b.offsets.back(), b.images.size());
  const uint64_t keep = (b.offsets[3] - b.offsets[2]) / 3, removed = b.offsets[3] - b.offsets[2] - keep;
  b.images.erase(b.images.begin() + long(b.offsets[2] + keep), b.images.begin() + long(b.offsets[3]));
  for (size_t i = 3; i < b.offsets.size(); ++i) b.offsets[i] -= removed;
  // A file whose every CRC holds, and dataset.json's entry says so: only the decoder can find the cut.
  const uint32_t crc = write_batch_file(path, b);
  for (bool raw : {true, false}) {
    const LoaderOptions o = loader_options(dir, 8, false, raw ? SampleOutput::raw : SampleOutput::floats, AugmentSpec{},
                                           DataShare{}, 2, 0);
    DatasetMeta m = meta;
    m.files[0].bytes = read_whole_file(path).size();
    m.files[0].crc32c = crc;
    Loader l(o, m);
    l.start_epoch(0);
    HostBatch hb;
    try {
      l.next(hb);
      ADD_FAILURE() << "a cut JPEG sample was decoded";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind(path + ": sample 2: ", 0), 0u) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
}

TEST(Augment, ABatchTooLargeForMemoryIsOneError) {
  // 8 samples of 60000 x 60000 x 3 bytes (86 GB, more than this machine has): the reader cannot
  // allocate the batch, and the consumer gets one line saying so instead of the process ending.
#ifdef CONVOY_TEST_SANITIZED
  GTEST_SKIP() << "the sanitizers' allocators end the process on such a request instead of failing it";
#else
  const std::string dir = jpeg_dataset("huge", {8}, 32);
  AugmentSpec a;
  a.crop = 60000;
  a.random_resized_crop = true;
  Loader l(loader_options(dir, 8, true, SampleOutput::raw, a, DataShare{}, 2, 0), read_dataset_meta(dir));
  l.start_epoch(0);
  HostBatch b;
  try {
    l.next(b);
    ADD_FAILURE() << "an 86 GB batch was allocated";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot allocate a batch of 8 samples of 60000x60000"), std::string::npos)
        << e.what();
  }
#endif
}
