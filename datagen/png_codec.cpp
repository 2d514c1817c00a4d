// PNG through libpng 1.6's simplified API. A 16-bit file without gamma information is read as sRGB
// (not as linear light), so 16-bit samples map to 8 bits by plain scaling, as they always have.
// Alpha is read and then dropped by hand: libpng would otherwise composite onto a background.
#include "datagen/png_codec.h"

#include <png.h>

#include <cstring>
#include <memory>

#include "datagen/image_codec.h"
#include "shared/error.h"

namespace convoy::datagen {
namespace {

// png_image owns libpng state between begin_read and finish_read; png_image_free releases it on
// every path out, including the exceptions thrown below.
struct PngImage {
  png_image image;
  PngImage() {
    std::memset(&image, 0, sizeof image);
    image.version = PNG_IMAGE_VERSION;
  }
  ~PngImage() { png_image_free(&image); }
  PngImage(const PngImage&) = delete;
  PngImage& operator=(const PngImage&) = delete;
};

uint32_t be32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

}  // namespace

void png_dimensions(const uint8_t* data, size_t n, uint32_t& width, uint32_t& height) {
  static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  if (n < 8 || std::memcmp(data, sig, 8) != 0) throw RejectError("not a PNG image");
  if (n < 24) throw RejectError("PNG is cut short (no IHDR)");
  if (std::memcmp(data + 12, "IHDR", 4) != 0) throw RejectError("PNG does not start with IHDR");
  width = be32(data + 16);
  height = be32(data + 20);
}

cv::Mat png_decode(const uint8_t* data, size_t n) {
  PngImage png;
  if (!png_image_begin_read_from_memory(&png.image, data, n))
    throw RejectError(std::string("PNG header cannot be read: ") + png.image.message);
  const bool color = (png.image.format & PNG_FORMAT_FLAG_COLOR) != 0;
  const bool alpha = (png.image.format & PNG_FORMAT_FLAG_ALPHA) != 0;
  png.image.format = color ? (alpha ? PNG_FORMAT_RGBA : PNG_FORMAT_RGB) : (alpha ? PNG_FORMAT_GA : PNG_FORMAT_GRAY);
  png.image.flags |= PNG_IMAGE_FLAG_16BIT_sRGB;
  const int stored = int(PNG_IMAGE_PIXEL_CHANNELS(png.image.format));
  const int w = int(png.image.width), h = int(png.image.height);
  cv::Mat raw(h, w, CV_8UC(stored));
  if (!png_image_finish_read(&png.image, nullptr, raw.data, png_int_32(raw.step[0]), nullptr))
    throw RejectError(std::string("PNG cannot be decoded: ") + png.image.message);
  // libpng only warns of a bad CRC in an ancillary chunk and drops the chunk; PIL refuses the file.
  // Its other warnings (an ICC profile it does not trust, say) leave good pixels, which PIL keeps.
  if ((png.image.warning_or_error & PNG_IMAGE_WARNING) != 0 && std::strstr(png.image.message, "CRC") != nullptr)
    throw RejectError(std::string("PNG is damaged: ") + png.image.message);
  if (!alpha) return raw;
  const int keep = color ? 3 : 1;
  cv::Mat out(h, w, CV_8UC(keep));
  for (int y = 0; y < h; ++y) {
    const uint8_t* s = raw.ptr<uint8_t>(y);
    uint8_t* d = out.ptr<uint8_t>(y);
    for (int x = 0; x < w; ++x, s += stored, d += keep) std::memcpy(d, s, size_t(keep));
  }
  return out;
}

std::string png_encode(const uint8_t* pixels, int width, int height, int channels) {
  if (channels != 1 && channels != 3) fail("PNG encoding supports 1 or 3 channels, not " + std::to_string(channels));
  PngImage png;
  png.image.width = png_uint_32(width);
  png.image.height = png_uint_32(height);
  png.image.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  const png_int_32 stride = png_int_32(width * channels);
  // Into a buffer of libpng's bound for the image: one encoding, where asking for the size first
  // would encode it twice (idx2tar encodes ten thousand, a run's end its mean image).
  png_alloc_size_t size = PNG_IMAGE_PNG_SIZE_MAX(png.image);
  std::string out(size, '\0');
  if (!png_image_write_to_memory(&png.image, out.data(), &size, 0, pixels, stride, nullptr))
    fail(std::string("PNG encoding failed: ") + png.image.message);
  out.resize(size);
  return out;
}

}  // namespace convoy::datagen
