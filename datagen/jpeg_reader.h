// A whole JPEG decoded through libjpeg with PIL's verdict on damage: data that ends before the
// image does is refused (PIL: "image file is truncated"), and so is anything libjpeg calls an error.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "shared/libjpeg_decompressor.h"

namespace convoy::datagen {

struct JpegInfo {
  int width = 0, height = 0;
  bool cmyk = false;  // CMYK or YCCK: decoded to CMYK, converted by the caller
};

// What a decode writes per pixel: 1 (grey), 3 (RGB) or 4 (CMYK, for CMYK and YCCK files) bytes.
enum class JpegPixels { gray = 1, rgb = 3, cmyk = 4 };

// libjpeg's corrupt-data warnings (a bad Huffman code, extraneous bytes before a marker, a marker
// in the middle of the data) do not refuse an image: PIL decodes on through them, as libjpeg does.
// The data running out does: the source suspends there, as PIL's does, where libjpeg's memory
// source would invent an end-of-image marker and decode the rest as flat grey. One reader per
// thread; a failure leaves it ready for the next image.
class JpegReader {
 public:
  JpegReader();
  ~JpegReader();
  JpegReader(const JpegReader&) = delete;
  JpegReader& operator=(const JpegReader&) = delete;

  // Reads the header of the n bytes at data, which must stay valid until decode() returns.
  // Throws RejectError.
  JpegInfo header(const uint8_t* data, size_t n);
  // Decodes the image whose header was just read, at 1/scale (1, 2, 4 or 8), into width x height
  // pixels, rows `stride` bytes apart; width and height must be libjpeg's rounding of the scaled
  // size (TJSCALED's). Throws RejectError.
  void decode(uint8_t* out, size_t stride, int width, int height, JpegPixels pixels, int scale);

 private:
  struct Source;
  LibjpegDecompressor d_;
  std::unique_ptr<Source> src_;
  std::vector<JSAMPROW> rows_;
};

}  // namespace convoy::datagen
