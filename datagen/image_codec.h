// Image decoding by content (JPEG through libjpeg with DCT-domain downscaling, PNG through libpng)
// to HWC uint8 RGB or gray, and JPEG encoding of finished samples (TurboJPEG). One codec per thread.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <opencv2/core.hpp>

#include "shared/jpeg_region.h"

namespace convoy::datagen {

class JpegReader;

// A member that cannot become a sample; the message is the reason written to rejects.tsv.
struct RejectError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct DecodeLimits {
  uint64_t max_pixels = 100'000'000;  // decompression-bomb guard, checked from the header
  double max_aspect = 50.0;           // longer side over shorter side
};

enum class ImageFormat { unknown, jpeg, png };

// The DCT scale datagen decodes a width x height JPEG at for an output whose short side is at least
// min_short: 1 / the returned denominator, the smallest of 1/8, 1/4, 1/2 that keeps the short side
// >= min_short (1: full size; min_short 0 too). libjpeg-turbo's other M/8 scales run its plain C
// IDCTs, slower than the SIMD ones of these: 6/8 decodes slower than 8/8, and 3/8 than 4/8.
int jpeg_scale_denominator(int width, int height, int min_short);
ImageFormat sniff_format(const uint8_t* data, size_t n);

class ImageCodec {
 public:
  ImageCodec();
  ~ImageCodec();
  ImageCodec(const ImageCodec&) = delete;
  ImageCodec& operator=(const ImageCodec&) = delete;

  // Decodes to CV_8UC1 (channels 1) or CV_8UC3 in RGB order (channels 3). JPEGs are decoded at the
  // smallest of the scales 1/8, 1/4, 1/2, 1 whose short side is still >= min_short (0: full size).
  // Throws RejectError for anything that is not a sound JPEG or PNG within the limits, with PIL's
  // verdict on damage: a file cut short is refused, libjpeg's corrupt-data warnings are not
  // (datagen/jpeg_reader.h), nor libpng's, but for a chunk's CRC (datagen/png_codec.h).
  cv::Mat decode(const uint8_t* data, size_t n, int channels, int min_short, const DecodeLimits& limits);
  // Memory from place(width, height) for a width x height x channels image, rows packed.
  using Placement = std::function<uint8_t*(int width, int height)>;
  // As decode(), but a JPEG that needs no colour conversion afterwards is offered to
  // place(...) (GPU staging memory) and decoded straight into it; an empty Mat is returned then.
  // When place returns nullptr, and for other images, the image comes back as from decode().
  // If place gave memory and a RejectError follows, that memory holds no image.
  cv::Mat decode(const uint8_t* data, size_t n, int channels, int min_short, const DecodeLimits& limits,
                 const Placement& place);
  // As decode(), but an RGB or grey JPEG may come back as only its centred square (side min(w, h)
  // of the decoded size, from floor((w - side) / 2), floor((h - side) / 2)), which is all that a
  // crop resize reads: only that square's iMCU columns are transformed and colour-converted, and
  // the rows below it are never decoded (shared/jpeg_region.h). Its pixels are those of the whole
  // decode. Valid until this codec's next call. Other images go as decode() with `place` takes them.
  cv::Mat decode_centre(const uint8_t* data, size_t n, int channels, int min_short, const DecodeLimits& limits,
                        const Placement& place);
  // JPEG-encodes an S x S x C image (4:2:0 for colour).
  void encode_jpeg(const uint8_t* pixels, int width, int height, int channels, int quality, std::vector<uint8_t>& out);

 private:
  cv::Mat decode_any(const uint8_t* data, size_t n, int channels, int min_short, const DecodeLimits& limits,
                     const Placement* place, bool centre);
  cv::Mat decode_jpeg(const uint8_t* data, size_t n, int channels, int min_short, const DecodeLimits& limits,
                      const Placement* place, bool centre);
  // The centred square alone, or an empty Mat when the whole decode must do it (see the .cpp).
  cv::Mat decode_square(const uint8_t* data, size_t n, int w, int h, int channels, int scale);

  std::unique_ptr<JpegReader> jpeg_;
  void* enc_ = nullptr;  // tjhandle
  std::unique_ptr<JpegRegionDecoder> region_;
};

// The calling thread's codec, made on first use and kept for the thread's life.
ImageCodec& thread_codec();

}  // namespace convoy::datagen
