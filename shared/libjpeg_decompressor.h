// libjpeg's decompressor (libjpeg-turbo) behind an error manager that jumps back instead of ending
// the process, for the decoders that need more than TurboJPEG offers (coefficients, partial decode).
#pragma once
// jpeglib.h uses size_t and FILE without including their headers.
#include <csetjmp>
#include <cstddef>
#include <cstdio>
#include <string>

#include <jpeglib.h>

namespace convoy {

class LibjpegDecompressor {
 public:
  // warnings_fail: a corrupt-data warning (libjpeg decodes on, with grey blocks) counts as an error,
  // as it does for TurboJPEG's tjDecompress2.
  explicit LibjpegDecompressor(bool warnings_fail);
  ~LibjpegDecompressor();
  LibjpegDecompressor(const LibjpegDecompressor&) = delete;
  LibjpegDecompressor& operator=(const LibjpegDecompressor&) = delete;

  jpeg_decompress_struct& info() { return info_; }
  // A fresh decompressor for the next image: libjpeg keeps the quantisation and Huffman tables of
  // the images before, so a file that lacks one would be decoded with another file's (a sound
  // image's pixels would then depend on the image decoded before it). Costs well under a µs.
  void renew();

  // Runs f, which may call libjpeg and must hold no object with a destructor (an error longjmps out
  // of it). Returns "" or libjpeg's message; the decompressor is ready for the next image either way.
  template <class F>
  std::string guarded(F&& f) {
    if (setjmp(err_.jump)) {
      jpeg_abort_decompress(&info_);
      return err_.message;
    }
    f();
    return "";
  }

 private:
  struct Error {
    jpeg_error_mgr mgr;
    std::jmp_buf jump;
    bool warnings_fail = false;
    char message[JMSG_LENGTH_MAX] = "";
  };
  static void error_exit(j_common_ptr c);
  static void emit_message(j_common_ptr c, int level);

  jpeg_decompress_struct info_{};
  Error err_{};
};

}  // namespace convoy
