// Decoding only the part of a JPEG sample that a crop needs: whole iMCU columns around it
// (jpeg_crop_scanline), its rows (the rows above skipped, those below never read), at 1/2, 1/4 or
// 1/8 scale (DCT scaling) when the caller asks for it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "shared/libjpeg_decompressor.h"

namespace convoy {

struct PixelRect {
  int x = 0, y = 0, w = 0, h = 0;
};

// Pixels of part of an image: `rect` (in the coordinates of the image as decoded) starts at `data`,
// rows `stride` bytes apart, `channels` bytes per pixel.
struct PixelView {
  const uint8_t* data = nullptr;
  size_t stride = 0;
  int channels = 0;
  PixelRect rect;
};

// The image's size when decoded at 1/scale, as libjpeg rounds it.
inline int scaled_length(int n, int scale) { return (n + scale - 1) / scale; }

class JpegRegionDecoder {
 public:
  JpegRegionDecoder() : d_(true) {}
  // Decodes `r`, in the coordinates of the image decoded at 1/scale (scale 1, 2, 4 or 8), of a JPEG
  // that must be width x height with 1 (grey) or 3 (RGB) channels. Fancy upsampling and the
  // accurate integer IDCT, as TurboJPEG's plain decode, so at scale 1 the pixels equal a full
  // decode's. The view stays valid until the next call. Throws convoy::Error with libjpeg's message.
  PixelView decode(const uint8_t* jpeg, size_t size, int width, int height, int channels, int scale, PixelRect r);
  // Whether the last decode's JPEG runs whole past the region: all of it was read (several scans),
  // or the bytes after the rows read are entropy-coded data (restart markers included) up to an
  // end-of-image marker. False means only "not known": a cut or damaged file, or another marker.
  // Found by looking for markers, not by decoding the rows below the region.
  bool rest_intact() const { return rest_intact_; }

 private:
  LibjpegDecompressor d_;
  std::vector<uint8_t> buf_;
  std::vector<JSAMPROW> rows_;
  bool rest_intact_ = false;
};

}  // namespace convoy
