// datagen's decode and resize: JPEG (RGB, gray, CMYK, progressive, 4:4:4/4:2:0) with DCT scaling
// to the smallest sufficient scale, PNG (8/16-bit, palette, RGBA, gray+alpha) found by content,
// refusals of damaged and empty data, the pixel-count and aspect guards, the resize policies, and
// the centred square decoded alone for a crop.
#include <gtest/gtest.h>

#include <turbojpeg.h>

#include <random>

#include "datagen/image_codec.h"
#include "datagen/png_codec.h"
#include "shared/error.h"
#include "shared/resize.h"
#include "test_datagen_fixtures.h"

using namespace convoy;
using namespace convoy::datagen;
using namespace fixtures;

namespace {

cv::Mat decode(const Bytes& b, int channels, int min_short = 0, DecodeLimits limits = {}) {
  ImageCodec codec;
  return codec.decode(reinterpret_cast<const uint8_t*>(b.data()), b.size(), channels, min_short, limits);
}

cv::Vec3b at3(const cv::Mat& m, int y, int x) { return m.at<cv::Vec3b>(y, x); }

void expect_near(cv::Vec3b got, int r, int g, int b, int tol) {
  EXPECT_NEAR(got[0], r, tol);
  EXPECT_NEAR(got[1], g, tol);
  EXPECT_NEAR(got[2], b, tol);
}

}  // namespace

TEST(DatagenDecode, JpegUsesTheSmallestSufficientDctScale) {
  const Bytes j = rgb_jpeg(800, 600, 1);
  EXPECT_EQ(decode(j, 3).size(), cv::Size(800, 600));
  EXPECT_EQ(decode(j, 3, 100).size(), cv::Size(200, 150));  // 1/4: 150 >= 100 > 75 at 1/8
  EXPECT_EQ(decode(j, 3, 75).size(), cv::Size(100, 75));    // 1/8
  EXPECT_EQ(decode(j, 3, 301).size(), cv::Size(800, 600));  // 1/2 gives 300 < 301
  EXPECT_EQ(decode(j, 3, 300).size(), cv::Size(400, 300));
  const cv::Mat m = decode(j, 3, 100);
  EXPECT_EQ(m.type(), CV_8UC3);
  expect_near(at3(m, 75, 0), 0, 127, 37, 12);  // RGB order: ramp in R, ramp in G, 37 in B
  expect_near(at3(m, 75, 199), 255, 127, 37, 12);
}

TEST(DatagenDecode, JpegVariants) {
  for (int samp : {TJSAMP_444, TJSAMP_420, TJSAMP_422}) {
    const cv::Mat m = decode(rgb_jpeg(64, 48, 2, samp), 3);
    ASSERT_EQ(m.size(), cv::Size(64, 48));
    expect_near(at3(m, 24, 32), 32 * 255 / 63, 24 * 255 / 47, 74, 12);
  }
  const cv::Mat prog = decode(rgb_jpeg(64, 48, 2, TJSAMP_420, TJFLAG_PROGRESSIVE), 3);
  expect_near(at3(prog, 24, 32), 32 * 255 / 63, 24 * 255 / 47, 74, 12);

  const cv::Mat gray3 = decode(gray_jpeg(16, 16, 200), 3);  // gray -> RGB: equal channels
  expect_near(at3(gray3, 8, 8), 200, 200, 200, 2);
  const cv::Mat gray1 = decode(gray_jpeg(16, 16, 200), 1);
  EXPECT_EQ(gray1.type(), CV_8UC1);
  EXPECT_NEAR(gray1.at<uint8_t>(8, 8), 200, 2);
  const cv::Mat rgb_to_gray = decode(rgb_jpeg(64, 48, 2), 1);
  EXPECT_EQ(rgb_to_gray.type(), CV_8UC1);

  // Adobe CMYK: C=255, M=0, Y=0, K=255 is red; C=M=Y=255, K=128 is mid gray.
  expect_near(at3(decode(cmyk_jpeg(16, 16, 255, 0, 0, 255), 3), 8, 8), 255, 0, 0, 4);
  expect_near(at3(decode(cmyk_jpeg(16, 16, 255, 255, 255, 128), 3), 8, 8), 128, 128, 128, 4);
  EXPECT_EQ(decode(cmyk_jpeg(16, 16, 255, 0, 0, 255), 1).type(), CV_8UC1);
}

// The centred square alone (for a crop) is exactly the whole decode's centre: landscape, portrait and
// square images, sides that are not whole MCUs, 4:2:0, 4:2:2, 4:4:4, grey and progressive, to RGB
// and grey, at every DCT scale; and a JPEG cut short below its centre comes back as the whole decode
// would have it, and one cut inside its centre too.
TEST(DatagenDecode, CentreSquareIsTheWholeDecodesCentre) {
  std::mt19937 rng(11);
  ImageCodec whole, centre;
  const DecodeLimits limits;
  const auto check = [&](const Bytes& j, int channels, int min_short, const std::string& what) {
    const auto* d = reinterpret_cast<const uint8_t*>(j.data());
    cv::Mat full, sq;
    std::string full_err, sq_err;
    try {
      full = whole.decode(d, j.size(), channels, min_short, limits).clone();
    } catch (const RejectError& e) {
      full_err = e.what();
    }
    try {
      sq = centre.decode_centre(d, j.size(), channels, min_short, limits, {}).clone();
    } catch (const RejectError& e) {
      sq_err = e.what();
    }
    ASSERT_EQ(full_err, sq_err) << what;
    if (!full_err.empty()) return;
    // The whole image when the partial decode left it to the whole decode (a cut in the square's rows).
    const int side = std::min(full.cols, full.rows);
    const cv::Mat want = sq.size() == full.size()
                             ? full
                             : full(cv::Rect((full.cols - side) / 2, (full.rows - side) / 2, side, side));
    ASSERT_EQ(sq.size(), want.size()) << what;
    ASSERT_EQ(cv::norm(sq, want, cv::NORM_INF), 0.0) << what;
    if (what.find("cut") == std::string::npos && full.cols != full.rows)
      EXPECT_EQ(sq.size(), cv::Size(side, side)) << what << ": a sound image decoded whole";
  };
  for (auto [w, h] : {std::pair{500, 375}, {375, 500}, {97, 61}, {61, 97}, {64, 64}, {333, 250}, {17, 300}})
    for (int samp : {TJSAMP_420, TJSAMP_422, TJSAMP_444, TJSAMP_GRAY})
      for (int flags : {0, TJFLAG_PROGRESSIVE}) {
        std::vector<uint8_t> px(size_t(w) * size_t(h) * 3);
        for (auto& v : px) v = uint8_t(rng());
        const Bytes j = samp == TJSAMP_GRAY ? jpeg(std::vector<uint8_t>(px.begin(), px.begin() + w * h), w, h,
                                                   TJPF_GRAY, samp, flags, 90)
                                            : jpeg(px, w, h, TJPF_RGB, samp, flags, 90);
        for (int channels : {1, 3})
          for (int min_short : {0, 24, 60, 128}) {
            const std::string what = std::to_string(w) + "x" + std::to_string(h) + " subsampling " +
                                     std::to_string(samp) + " flags " + std::to_string(flags) + " channels " +
                                     std::to_string(channels) + " min_short " + std::to_string(min_short);
            check(j, channels, min_short, what);
            check(j.substr(0, j.size() * 9 / 10), channels, min_short, what + ", cut below the centre");
            check(j.substr(0, j.size() / 2), channels, min_short, what + ", cut inside the centre");
          }
      }
}

TEST(DatagenDecode, PngVariantsByContent) {
  cv::Mat bgr(6, 5, CV_8UC3, cv::Scalar(10, 20, 30));  // B, G, R
  expect_near(at3(decode(png(bgr), 3), 1, 1), 30, 20, 10, 0);
  cv::Mat bgra(6, 5, CV_8UC4, cv::Scalar(10, 20, 30, 0));  // fully transparent: alpha dropped
  expect_near(at3(decode(png(bgra), 3), 1, 1), 30, 20, 10, 0);
  cv::Mat deep(4, 4, CV_16UC3, cv::Scalar(257 * 10, 257 * 20, 257 * 30));
  expect_near(at3(decode(png(deep), 3), 1, 1), 30, 20, 10, 0);
  cv::Mat gray16(4, 4, CV_16UC1, cv::Scalar(65535));
  EXPECT_EQ(decode(png(gray16), 1).at<uint8_t>(0, 0), 255);
  const cv::Mat pal = decode(palette_png(6, 4), 3);
  ASSERT_EQ(pal.size(), cv::Size(6, 4));
  expect_near(at3(pal, 0, 0), 255, 0, 0, 0);  // index 0: red
  expect_near(at3(pal, 0, 1), 0, 0, 255, 0);  // index 1: blue
  expect_near(at3(pal, 1, 0), 0, 0, 255, 0);
}

TEST(DatagenDecode, PngGrayAlphaRoundingAndEncoding) {
  // Gray + alpha (colour type 4): alpha dropped, gray kept, and replicated for 3 channels.
  const Bytes ga = png_file(2, 1, 8, 4, std::string{char(77), char(0), char(200), char(255)}, 4);
  const cv::Mat g1 = decode(ga, 1);
  ASSERT_EQ(g1.type(), CV_8UC1);
  EXPECT_EQ(g1.at<uint8_t>(0, 0), 77);
  EXPECT_EQ(g1.at<uint8_t>(0, 1), 200);
  expect_near(at3(decode(ga, 3), 0, 1), 200, 200, 200, 0);
  // 16-bit samples scale to 8 bits with rounding, without gamma: 385 / 257 = 1.498 -> 1, 386 -> 2.
  cv::Mat deep(1, 2, CV_16UC1);
  deep.at<uint16_t>(0, 0) = 385, deep.at<uint16_t>(0, 1) = 386;
  const cv::Mat eight = decode(png(deep), 1);
  EXPECT_EQ(eight.at<uint8_t>(0, 0), 1);
  EXPECT_EQ(eight.at<uint8_t>(0, 1), 2);
  // Encoding gives back the same pixels, gray and RGB.
  for (int ch : {1, 3}) {
    cv::Mat m(7, 11, CV_8UC(ch));
    cv::randu(m, 0, 256);
    const std::string p = png_encode(m.data, m.cols, m.rows, ch);
    const cv::Mat back = png_decode(reinterpret_cast<const uint8_t*>(p.data()), p.size());
    ASSERT_EQ(back.type(), m.type());
    EXPECT_EQ(cv::norm(back, m, cv::NORM_INF), 0) << ch << " channels";
  }
}

// The whole decode (libjpeg, for PIL's verdict on damage) gives TurboJPEG's pixels, which datasets
// made before were decoded with: every subsampling, progressive, grey, CMYK, every DCT scale.
TEST(DatagenDecode, WholeDecodeGivesTurboJpegsPixels) {
  std::mt19937 rng(5);
  ImageCodec codec;
  tjhandle tj = tjInitDecompress();
  for (auto [w, h] : {std::pair{500, 375}, {97, 61}, {64, 64}, {17, 300}})
    for (int samp : {int(TJSAMP_420), int(TJSAMP_422), int(TJSAMP_444), int(TJSAMP_440), int(TJSAMP_GRAY), -1})
      for (int flags : {0, TJFLAG_PROGRESSIVE}) {
        std::vector<uint8_t> px(size_t(w) * size_t(h) * 4);
        for (auto& v : px) v = uint8_t(rng());
        const Bytes j = samp == -1            ? jpeg(px, w, h, TJPF_CMYK, TJSAMP_444, flags, 90)
                        : samp == TJSAMP_GRAY ? jpeg(px, w, h, TJPF_GRAY, samp, flags, 90)
                                              : jpeg(px, w, h, TJPF_RGB, samp, flags, 90);
        const auto* d = reinterpret_cast<const uint8_t*>(j.data());
        for (int channels : {1, 3})
          for (int min_short : {0, 9, 30, 60}) {
            const cv::Mat got = codec.decode(d, j.size(), channels, min_short, {});
            const tjscalingfactor sf{1, jpeg_scale_denominator(w, h, min_short)};
            const int sw = TJSCALED(w, sf), sh = TJSCALED(h, sf),
                      pf = samp == -1      ? TJPF_CMYK
                           : channels == 1 ? TJPF_GRAY
                                           : TJPF_RGB;
            cv::Mat want(sh, sw, CV_8UC(tjPixelSize[pf]));
            ASSERT_EQ(tjDecompress2(tj, d, j.size(), want.data, sw, int(want.step[0]), sh, pf, 0), 0);
            const std::string what = std::to_string(w) + "x" + std::to_string(h) + " subsampling " +
                                     std::to_string(samp) + " flags " + std::to_string(flags) + " channels " +
                                     std::to_string(channels) + " min_short " + std::to_string(min_short);
            if (samp == -1) {  // CMYK is converted after the decode: compare what that makes of TurboJPEG's
              ASSERT_EQ(got.size(), cv::Size(sw, sh)) << what;
              const cv::Vec4b k = want.at<cv::Vec4b>(sh / 2, sw / 2);
              const uint8_t r = uint8_t((k[0] * k[3] + 127) / 255);
              if (channels == 3) EXPECT_EQ(got.at<cv::Vec3b>(sh / 2, sw / 2)[0], r) << what;
              continue;
            }
            ASSERT_EQ(got.size(), want.size()) << what;
            ASSERT_EQ(got.type(), want.type()) << what;
            ASSERT_EQ(cv::norm(got, want, cv::NORM_INF), 0.0) << what;
          }
      }
  tjDestroy(tj);
}

// The placement may decode other images on the same thread before it returns (a GPU lane delivering
// earlier samples, whose statistics decode their re-encoded JPEG): the image asked for still
// decodes whole, into the place given.
TEST(DatagenDecode, APlacementThatDecodesAnotherImageLeavesTheDecodeWhole) {
  const Bytes a = rgb_jpeg(96, 64, 3), other = rgb_jpeg(40, 30, 9);
  ImageCodec codec;
  const cv::Mat want = codec.decode(reinterpret_cast<const uint8_t*>(a.data()), a.size(), 3, 0, {});
  std::vector<uint8_t> placed;
  const ImageCodec::Placement place = [&](int width, int height) {
    const cv::Mat o = codec.decode(reinterpret_cast<const uint8_t*>(other.data()), other.size(), 3, 0, {});
    EXPECT_EQ(o.size(), cv::Size(40, 30));
    placed.assign(size_t(width) * size_t(height) * 3, 0);
    return placed.data();
  };
  EXPECT_TRUE(codec.decode(reinterpret_cast<const uint8_t*>(a.data()), a.size(), 3, 0, {}, place).empty());
  ASSERT_EQ(placed.size(), want.total() * 3);
  EXPECT_EQ(cv::norm(cv::Mat(64, 96, CV_8UC3, placed.data()), want, cv::NORM_INF), 0.0);
}

// libjpeg keeps an image's Huffman and quantisation tables for the next one: a JPEG whose tables
// were lost must not be decoded with those of the image before it (PIL refuses such a file).
TEST(DatagenDecode, AJpegWithoutItsTablesIsNotDecodedWithTheImageBefores) {
  const Bytes sound = jpeg(pattern(48, 40, 3), 48, 40, TJPF_RGB, TJSAMP_444, TJFLAG_PROGRESSIVE, 90);
  Bytes tableless = sound;
  for (size_t at = 0; (at = tableless.find(std::string("\xFF\xC4", 2), at)) != Bytes::npos;) {
    const size_t len = (size_t(uint8_t(tableless[at + 2])) << 8) | uint8_t(tableless[at + 3]);
    tableless.erase(at, len + 2);  // every DHT segment
  }
  ASSERT_LT(tableless.size(), sound.size());
  for (bool centre : {false, true}) {
    ImageCodec codec;
    const auto run = [&](const Bytes& b) {
      const auto* d = reinterpret_cast<const uint8_t*>(b.data());
      return centre ? codec.decode_centre(d, b.size(), 3, 0, {}, {}) : codec.decode(d, b.size(), 3, 0, {});
    };
    EXPECT_EQ(run(sound).cols, centre ? 40 : 48);
    EXPECT_THROW(run(tableless), RejectError) << (centre ? "centre" : "whole") << " decode after a sound image";
  }
}

TEST(DatagenDecode, DamagedAndEmptyDataAreRejectedWithAReason) {
  const uint8_t none = 0;
  ImageCodec codec;
  EXPECT_THROW(codec.decode(&none, 0, 3, 0, {}), RejectError);
  EXPECT_THROW(decode("hello, this is a README", 3), RejectError);
  Bytes j = rgb_jpeg(64, 64, 1);
  EXPECT_THROW(decode(j.substr(0, 20), 3), RejectError);  // header cut short
  Bytes garbled = j.substr(0, 4) + std::string(200, '\x55');
  EXPECT_THROW(decode(garbled, 3), RejectError);
  Bytes p = png(cv::Mat(8, 8, CV_8UC3, cv::Scalar(1, 2, 3)));
  EXPECT_THROW(decode(p.substr(0, p.size() / 2), 3), RejectError);
  // One codec goes on decoding sound images after refusing damaged ones.
  const Bytes bad = "\xFF\xD8\xFF junk";
  EXPECT_THROW(codec.decode(reinterpret_cast<const uint8_t*>(bad.data()), bad.size(), 3, 0, {}), RejectError);
  EXPECT_EQ(codec.decode(reinterpret_cast<const uint8_t*>(j.data()), j.size(), 3, 0, {}).size(), cv::Size(64, 64));
  EXPECT_THROW(codec.decode(reinterpret_cast<const uint8_t*>(garbled.data()), garbled.size(), 3, 0, {}), RejectError);
  EXPECT_EQ(codec.decode(reinterpret_cast<const uint8_t*>(j.data()), j.size(), 3, 16, {}).size(), cv::Size(16, 16));
  try {
    decode("GIF89a....", 3);
  } catch (const RejectError& e) {
    EXPECT_NE(std::string(e.what()).find("not a JPEG or PNG"), std::string::npos);
  }
}

TEST(DatagenDecode, PixelLimitAndAspectGuardComeFromTheHeader) {
  // A small JPEG whose frame header claims 60000 x 60000: refused before any pixel buffer exists.
  Bytes j = rgb_jpeg(16, 16, 1);
  const size_t sof = j.find("\xFF\xC0", 0, 2);
  ASSERT_NE(sof, std::string::npos);
  j[sof + 5] = char(0xEA), j[sof + 6] = char(0x60), j[sof + 7] = char(0xEA), j[sof + 8] = char(0x60);
  try {
    decode(j, 3);
    FAIL() << "a 60000x60000 header must be refused";
  } catch (const RejectError& e) {
    EXPECT_NE(std::string(e.what()).find("60000x60000"), std::string::npos) << e.what();
  }
  Bytes p = png(cv::Mat(8, 8, CV_8UC1, cv::Scalar(3)));
  p[16] = char(0x7F);  // width 2^30-ish in IHDR
  EXPECT_THROW(decode(p, 1), RejectError);

  DecodeLimits tight;
  tight.max_pixels = 99;
  EXPECT_THROW(decode(rgb_jpeg(10, 10, 1), 3, 0, tight), RejectError);
  EXPECT_NO_THROW(decode(rgb_jpeg(9, 11, 1), 3, 0, tight));
  DecodeLimits aspect;
  aspect.max_aspect = 10;
  EXPECT_THROW(decode(rgb_jpeg(200, 10, 1), 3, 0, aspect), RejectError);
  EXPECT_NO_THROW(decode(rgb_jpeg(100, 10, 1), 3, 0, aspect));
}

TEST(DatagenResize, CropTakesTheCentreSquare) {
  // 40 x 20: black left and right quarters, white centre; the centre 20 x 20 is all white.
  cv::Mat img(20, 40, CV_8UC3, cv::Scalar(0, 0, 0));
  img(cv::Rect(10, 0, 20, 20)).setTo(cv::Scalar(255, 255, 255));
  std::vector<uint8_t> out(10 * 10 * 3);
  resize_to_square(img, 10, ResizePolicy::crop, out.data());
  for (uint8_t v : out) ASSERT_EQ(v, 255);
  resize_to_square(img, 10, ResizePolicy::squash, out.data());
  EXPECT_EQ(out[0], 0);                   // squash keeps the black left edge
  EXPECT_EQ(out[(5 * 10 + 5) * 3], 255);  // and the white centre
  // Odd margins: offsets round down.
  cv::Mat odd(3, 6, CV_8UC1);
  for (int x = 0; x < 6; ++x) odd.col(x).setTo(x * 10);
  std::vector<uint8_t> three(9);
  resize_to_square(odd, 3, ResizePolicy::crop, three.data());
  EXPECT_EQ(three[0], 10);  // columns 1..3
  EXPECT_EQ(three[2], 30);
  EXPECT_THROW(resize_to_square(img, 10, ResizePolicy::short_side, out.data()), Error);
  EXPECT_THROW(parse_resize_policy("stretch"), Error);
}

TEST(DatagenResize, ShrinkIsAntialiasedAndEnlargeIsSmooth) {
  // A 1-pixel checkerboard shrunk 8x must average to gray, not alias to black or white.
  cv::Mat checker(64, 64, CV_8UC1);
  for (int y = 0; y < 64; ++y)
    for (int x = 0; x < 64; ++x) checker.at<uint8_t>(y, x) = ((x + y) % 2) ? 255 : 0;
  std::vector<uint8_t> small(8 * 8);
  resize_to_square(checker, 8, ResizePolicy::crop, small.data());
  for (uint8_t v : small) ASSERT_NEAR(v, 128, 1);
  // Enlarging a 2 x 2 image gives intermediate values (bilinear), not blocks.
  cv::Mat tiny = (cv::Mat_<uint8_t>(2, 2) << 0, 255, 0, 255);
  std::vector<uint8_t> big(8 * 8);
  resize_to_square(tiny, 8, ResizePolicy::squash, big.data());
  EXPECT_EQ(big[0], 0);
  EXPECT_EQ(big[7], 255);
  EXPECT_GT(big[4], 0);
  EXPECT_LT(big[3], 255);
  // Same size: a plain copy.
  cv::Mat same(5, 5, CV_8UC3, cv::Scalar(1, 2, 3));
  std::vector<uint8_t> copy(75);
  resize_to_square(same, 5, ResizePolicy::crop, copy.data());
  EXPECT_EQ(copy[0], 1);
  EXPECT_EQ(copy[74], 3);
}

TEST(DatagenEncode, JpegRoundTrip) {
  ImageCodec codec;
  std::vector<uint8_t> px = pattern(32, 32, 4), out;
  codec.encode_jpeg(px.data(), 32, 32, 3, 90, out);
  ASSERT_GT(out.size(), 100u);
  cv::Mat back = codec.decode(out.data(), out.size(), 3, 0, {});
  ASSERT_EQ(back.size(), cv::Size(32, 32));
  expect_near(at3(back, 16, 16), px[(16 * 32 + 16) * 3], px[(16 * 32 + 16) * 3 + 1], px[(16 * 32 + 16) * 3 + 2], 10);
}
