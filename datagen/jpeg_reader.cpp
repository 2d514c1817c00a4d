// The suspending memory source and the decode. A suspension (the source has no more bytes) before
// the last row is PIL's "image file is truncated"; one while jpeg_finish_decompress looks for the
// end-of-image marker after the last row is not (PIL keeps that image too).
#include "datagen/jpeg_reader.h"

#include <algorithm>
#include <string>

#include "datagen/image_codec.h"
#include "shared/error.h"

namespace convoy::datagen {

// The whole JPEG in memory; past its end the source suspends rather than inventing data.
struct JpegReader::Source {
  jpeg_source_mgr mgr{};

  Source() {
    mgr.init_source = [](j_decompress_ptr) {};
    mgr.fill_input_buffer = [](j_decompress_ptr) -> boolean { return FALSE; };
    mgr.skip_input_data = [](j_decompress_ptr c, long n) {
      if (n <= 0) return;
      const size_t skip = std::min(size_t(n), c->src->bytes_in_buffer);  // beyond the end: suspends later
      c->src->next_input_byte += skip;
      c->src->bytes_in_buffer -= skip;
    };
    mgr.resync_to_restart = jpeg_resync_to_restart;
    mgr.term_source = [](j_decompress_ptr) {};
  }
};

JpegReader::JpegReader() : d_(false), src_(std::make_unique<Source>()) {}
JpegReader::~JpegReader() = default;

JpegInfo JpegReader::header(const uint8_t* data, size_t n) {
  d_.renew();
  jpeg_decompress_struct& info = d_.info();
  src_->mgr.next_input_byte = data;
  src_->mgr.bytes_in_buffer = n;
  info.src = &src_->mgr;
  int rc = JPEG_SUSPENDED;
  const std::string err = d_.guarded([&] { rc = jpeg_read_header(&info, TRUE); });
  if (!err.empty()) throw RejectError("JPEG header cannot be read: " + err);
  if (rc != JPEG_HEADER_OK) {
    jpeg_abort_decompress(&info);
    throw RejectError("JPEG is cut short: its data ends in the header");
  }
  const bool cmyk = info.jpeg_color_space == JCS_CMYK || info.jpeg_color_space == JCS_YCCK;
  return {int(info.image_width), int(info.image_height), cmyk};
}

void JpegReader::decode(uint8_t* out, size_t stride, int width, int height, JpegPixels pixels, int scale) {
  jpeg_decompress_struct& info = d_.info();
  info.out_color_space = pixels == JpegPixels::gray ? JCS_GRAYSCALE : pixels == JpegPixels::rgb ? JCS_RGB : JCS_CMYK;
  info.dct_method = JDCT_ISLOW;  // TurboJPEG's defaults, so the pixels are those it gave
  info.do_fancy_upsampling = TRUE;
  info.scale_num = 1;
  info.scale_denom = unsigned(scale);
  bool started = false, whole = false;
  std::string err = d_.guarded([&] { started = jpeg_start_decompress(&info); });
  if (!err.empty()) throw RejectError("JPEG cannot be decoded: " + err);
  if (started &&
      (info.output_components != int(pixels) || int(info.output_width) != width || int(info.output_height) != height)) {
    jpeg_abort_decompress(&info);
    fail("internal: libjpeg decodes to " + std::to_string(info.output_width) + "x" +
         std::to_string(info.output_height) + "x" + std::to_string(info.output_components) + ", not " +
         std::to_string(width) + "x" + std::to_string(height) + "x" + std::to_string(int(pixels)));
  }
  if (started) {
    rows_.resize(info.output_height);
    for (JDIMENSION y = 0; y < info.output_height; ++y) rows_[y] = out + size_t(y) * stride;
    err = d_.guarded([&] {
      while (info.output_scanline < info.output_height &&
             jpeg_read_scanlines(&info, rows_.data() + info.output_scanline,
                                 info.output_height - info.output_scanline) > 0) {
      }
      whole = info.output_scanline == info.output_height;
      if (whole) jpeg_finish_decompress(&info);  // FALSE: no end-of-image marker, which PIL forgives
    });
  }
  jpeg_abort_decompress(&info);
  if (!err.empty()) throw RejectError("JPEG cannot be decoded: " + err);
  if (!whole) throw RejectError("JPEG is cut short: its data ends before the image does (truncated file)");
}

}  // namespace convoy::datagen
