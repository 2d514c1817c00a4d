// Decoding and encoding. The pixel limit and the aspect guard are checked from the image header,
// before any pixel buffer is allocated; CMYK/YCCK JPEGs are converted with the Adobe (inverted)
// convention that libjpeg-turbo itself uses.
#include "datagen/image_codec.h"

#include <turbojpeg.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <opencv2/imgproc.hpp>

#include "datagen/jpeg_reader.h"
#include "datagen/png_codec.h"
#include "shared/error.h"

namespace convoy::datagen {
namespace {

void check_geometry(uint64_t w, uint64_t h, const DecodeLimits& limits) {
  if (w == 0 || h == 0) throw RejectError("image has a zero dimension");
  if (w * h > limits.max_pixels)
    throw RejectError("image is " + std::to_string(w) + "x" + std::to_string(h) + ", over the limit of " +
                      std::to_string(limits.max_pixels) + " pixels");
  const double aspect = double(std::max(w, h)) / double(std::min(w, h));
  if (aspect > limits.max_aspect)
    throw RejectError("aspect ratio " + std::to_string(w) + "x" + std::to_string(h) + " is over the limit of " +
                      std::to_string(int(limits.max_aspect)) + ":1");
}

cv::Mat to_channels(cv::Mat rgb_or_gray, int channels) {
  if (rgb_or_gray.channels() == channels) return rgb_or_gray;
  cv::Mat out;
  cv::cvtColor(rgb_or_gray, out, channels == 1 ? cv::COLOR_RGB2GRAY : cv::COLOR_GRAY2RGB);
  return out;
}

cv::Mat decode_png(const uint8_t* data, size_t n, int channels, const DecodeLimits& limits) {
  uint32_t w = 0, h = 0;
  png_dimensions(data, n, w, h);
  check_geometry(w, h, limits);
  return to_channels(png_decode(data, n), channels);
}

}  // namespace

ImageFormat sniff_format(const uint8_t* d, size_t n) {
  static const uint8_t png[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  if (n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF) return ImageFormat::jpeg;
  if (n >= 8 && std::memcmp(d, png, 8) == 0) return ImageFormat::png;
  return ImageFormat::unknown;
}

int jpeg_scale_denominator(int width, int height, int min_short) {
  for (int denom : {8, 4, 2}) {
    const tjscalingfactor f{1, denom};
    if (min_short > 0 && std::min(TJSCALED(width, f), TJSCALED(height, f)) >= min_short) return denom;
  }
  return 1;
}

ImageCodec::ImageCodec() : jpeg_(std::make_unique<JpegReader>()), enc_(tjInitCompress()) {
  if (!enc_) fail("TurboJPEG initialisation failed");
}

ImageCodec::~ImageCodec() {
  if (enc_) tjDestroy(enc_);
}

cv::Mat ImageCodec::decode(const uint8_t* data, size_t n, int channels, int min_short, const DecodeLimits& limits) {
  return decode(data, n, channels, min_short, limits, Placement());
}

cv::Mat ImageCodec::decode(const uint8_t* data, size_t n, int channels, int min_short, const DecodeLimits& limits,
                           const Placement& place) {
  return decode_any(data, n, channels, min_short, limits, place ? &place : nullptr, false);
}

cv::Mat ImageCodec::decode_centre(const uint8_t* data, size_t n, int channels, int min_short,
                                  const DecodeLimits& limits, const Placement& place) {
  return decode_any(data, n, channels, min_short, limits, place ? &place : nullptr, true);
}

cv::Mat ImageCodec::decode_any(const uint8_t* data, size_t n, int channels, int min_short, const DecodeLimits& limits,
                               const Placement* place, bool centre) {
  if (n == 0) throw RejectError("empty member");
  const ImageFormat fmt = sniff_format(data, n);
  if (fmt == ImageFormat::png) return decode_png(data, n, channels, limits);
  if (fmt != ImageFormat::jpeg) throw RejectError("not a JPEG or PNG image (by content)");
  return decode_jpeg(data, n, channels, min_short, limits, place, centre);
}

cv::Mat ImageCodec::decode_jpeg(const uint8_t* data, size_t n, int channels, int min_short, const DecodeLimits& limits,
                                const Placement* place, bool centre) {
  const JpegInfo info = jpeg_->header(data, n);
  const int w = info.width, h = info.height;
  check_geometry(uint64_t(w), uint64_t(h), limits);

  const tjscalingfactor sf{1, jpeg_scale_denominator(w, h, min_short)};
  const int sw = TJSCALED(w, sf), sh = TJSCALED(h, sf);
  const bool cmyk = info.cmyk;
  if (centre && !cmyk && sw != sh)
    if (cv::Mat square = decode_square(data, n, w, h, channels, sf.denom); !square.empty()) return square;
  const JpegPixels px = cmyk ? JpegPixels::cmyk : channels == 1 ? JpegPixels::gray : JpegPixels::rgb;
  const int bytes = int(px);
  uint8_t* placed = place != nullptr && !cmyk ? (*place)(sw, sh) : nullptr;
  // The placement may run other work on this thread first (a GPU lane delivering earlier samples):
  // the header is read again, so that the decode never depends on what that work left in the reader.
  if (place != nullptr && !cmyk) jpeg_->header(data, n);
  const bool direct = placed != nullptr;
  cv::Mat out = direct ? cv::Mat(sh, sw, CV_8UC(bytes), placed) : cv::Mat(sh, sw, CV_8UC(bytes));
  jpeg_->decode(out.data, out.step[0], sw, sh, px, sf.denom);
  if (direct) return cv::Mat();
  if (!cmyk) return out;
  cv::Mat rgb(sh, sw, CV_8UC3);
  for (int y = 0; y < sh; ++y) {
    const uint8_t* s = out.ptr<uint8_t>(y);
    uint8_t* d = rgb.ptr<uint8_t>(y);
    for (int x = 0; x < sw; ++x, s += 4, d += 3) {
      const unsigned k = s[3];
      d[0] = uint8_t((s[0] * k + 127) / 255);
      d[1] = uint8_t((s[1] * k + 127) / 255);
      d[2] = uint8_t((s[2] * k + 127) / 255);
    }
  }
  return to_channels(rgb, channels);
}

void ImageCodec::encode_jpeg(const uint8_t* pixels, int width, int height, int channels, int quality,
                             std::vector<uint8_t>& out) {
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  const int pf = channels == 1 ? TJPF_GRAY : TJPF_RGB;
  const int samp = channels == 1 ? TJSAMP_GRAY : TJSAMP_420;
  if (tjCompress2(enc_, pixels, width, 0, height, pf, &buf, &size, samp, quality, 0) != 0) {
    if (buf) tjFree(buf);
    fail(std::string("JPEG encoding failed: ") + tjGetErrorStr2(enc_));
  }
  out.assign(buf, buf + size);
  tjFree(buf);
}

// Any trouble in the partial decode (libjpeg counts a corrupt-data warning as an error there,
// where the whole decode goes on as PIL does), and any doubt that the data runs whole to its
// end-of-image marker past the square, leaves the image to the whole decode, which then accepts or
// refuses it: the partial decode only ever gives the same pixels and the same verdict sooner.
cv::Mat ImageCodec::decode_square(const uint8_t* data, size_t n, int w, int h, int channels, int scale) {
  if (!region_) region_ = std::make_unique<JpegRegionDecoder>();
  const int sw = scaled_length(w, scale), sh = scaled_length(h, scale), side = std::min(sw, sh);
  const PixelRect r{(sw - side) / 2, (sh - side) / 2, side, side};
  try {
    const PixelView v = region_->decode(data, n, w, h, channels, scale, r);
    if (!region_->rest_intact()) return cv::Mat();
    return cv::Mat(side, side, CV_8UC(channels), const_cast<uint8_t*>(v.data), v.stride);
  } catch (const std::exception&) {
    return cv::Mat();
  }
}

ImageCodec& thread_codec() {
  thread_local std::unique_ptr<ImageCodec> c;
  if (!c) c = std::make_unique<ImageCodec>();
  return *c;
}

}  // namespace convoy::datagen
