// The partial decode. Rows above the region are skipped (entropy-decoded only: Huffman data has no
// random access), rows below are never touched, and columns outside the region's iMCU columns are
// neither transformed nor colour-converted.
#include "shared/jpeg_region.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "shared/error.h"

namespace convoy {
namespace {

// After the last row a single-scan JPEG holds the rest of its entropy-coded data, where 0xFF is
// followed by 0x00 (a stuffed byte), by a restart marker or by more 0xFF (fill), then EOI.
bool data_runs_to_eoi(const jpeg_decompress_struct& info) {
  if (jpeg_has_multiple_scans(const_cast<jpeg_decompress_struct*>(&info))) return true;  // read up to EOI
  if (info.unread_marker != 0) return info.unread_marker == 0xD9;
  const uint8_t* p = info.src->next_input_byte;
  const uint8_t* const end = p + info.src->bytes_in_buffer;
  while (p < end && (p = static_cast<const uint8_t*>(std::memchr(p, 0xFF, size_t(end - p)))) != nullptr) {
    const uint8_t* q = p + 1;
    while (q < end && *q == 0xFF) ++q;
    if (q == end) return false;
    if (*q != 0x00 && (*q < 0xD0 || *q > 0xD7)) return *q == 0xD9;
    p = q + 1;
  }
  return false;
}

}  // namespace

PixelView JpegRegionDecoder::decode(const uint8_t* jpeg, size_t size, int width, int height, int channels, int scale,
                                    PixelRect r) {
  d_.renew();
  jpeg_decompress_struct& info = d_.info();
  bool shape_ok = true;
  std::string err = d_.guarded([&] {
    jpeg_mem_src(&info, jpeg, static_cast<unsigned long>(size));
    jpeg_read_header(&info, TRUE);
    shape_ok = int(info.image_width) == width && int(info.image_height) == height;
  });
  if (!err.empty()) fail(err);
  if (!shape_ok) {
    const std::string got = std::to_string(info.image_width) + "x" + std::to_string(info.image_height);
    jpeg_abort_decompress(&info);
    fail("JPEG is " + got + ", dataset.json says " + std::to_string(width) + "x" + std::to_string(height));
  }
  rest_intact_ = false;
  const int sw = scaled_length(width, scale), sh = scaled_length(height, scale);
  if (r.x < 0 || r.y < 0 || r.w <= 0 || r.h <= 0 || r.x + r.w > sw || r.y + r.h > sh) {
    jpeg_abort_decompress(&info);
    fail("internal: region outside the decoded image");
  }
  info.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  info.dct_method = JDCT_ISLOW;
  info.do_fancy_upsampling = TRUE;
  info.scale_num = 1;
  info.scale_denom = unsigned(scale);
  err = d_.guarded([&] { jpeg_start_decompress(&info); });
  if (!err.empty()) fail(err);
  if (int(info.output_width) != sw || int(info.output_height) != sh || int(info.output_components) != channels) {
    jpeg_abort_decompress(&info);
    fail("libjpeg decodes it to " + std::to_string(info.output_width) + "x" + std::to_string(info.output_height) + "x" +
         std::to_string(info.output_components) + " at 1/" + std::to_string(scale) + " scale");
  }
  // jpeg_crop_scanline moves the first column left to an iMCU edge, and fancy upsampling treats the
  // first and last columns it decodes as the image's edges: a region that starts on an iMCU edge
  // takes 2 columns of the iMCU before, and every region 2 columns after, so that its own pixels
  // are those of a full decode.
  const int imcu = info.max_h_samp_factor * info.min_DCT_scaled_size;
  int a = r.x, e = r.x + r.w;
  if (a % imcu < 2) a = std::max(0, a - 2);
  e = std::min(sw, e + 2);
  JDIMENSION x0 = JDIMENSION(a), cw = JDIMENSION(e - a);
  size_t stride = 0;
  err = d_.guarded([&] {
    if (cw < info.output_width) jpeg_crop_scanline(&info, &x0, &cw);  // x0 moves left to an iMCU edge
    stride = size_t(info.output_width) * size_t(channels);
    buf_.resize(stride * size_t(r.h));
    rows_.resize(size_t(r.h));
    for (int y = 0; y < r.h; ++y) rows_[size_t(y)] = buf_.data() + size_t(y) * stride;
    if (r.y > 0) jpeg_skip_scanlines(&info, JDIMENSION(r.y));
    while (int(info.output_scanline) < r.y + r.h)
      jpeg_read_scanlines(&info, rows_.data() + (info.output_scanline - JDIMENSION(r.y)),
                          JDIMENSION(r.y + r.h) - info.output_scanline);
    rest_intact_ = data_runs_to_eoi(info);
    // The rows below the region are not wanted: stop here rather than decode them.
    jpeg_abort_decompress(&info);
  });
  if (!err.empty()) fail(err);
  return PixelView{buf_.data() + size_t(r.x - int(x0)) * size_t(channels), stride, channels, r};
}

}  // namespace convoy
