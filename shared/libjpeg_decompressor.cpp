// The jumping error manager: libjpeg's default one calls exit(), which no tool of convoy may do on
// a bad image.
#include "shared/libjpeg_decompressor.h"

namespace convoy {

LibjpegDecompressor::LibjpegDecompressor(bool warnings_fail) {
  info_.err = jpeg_std_error(&err_.mgr);
  err_.warnings_fail = warnings_fail;
  err_.mgr.error_exit = error_exit;
  err_.mgr.emit_message = emit_message;
  jpeg_create_decompress(&info_);
}

LibjpegDecompressor::~LibjpegDecompressor() { jpeg_destroy_decompress(&info_); }

void LibjpegDecompressor::renew() {
  jpeg_destroy_decompress(&info_);
  info_ = jpeg_decompress_struct{};
  info_.err = &err_.mgr;
  jpeg_create_decompress(&info_);
}

void LibjpegDecompressor::error_exit(j_common_ptr c) {
  Error* e = reinterpret_cast<Error*>(c->err);
  c->err->format_message(c, e->message);
  std::longjmp(e->jump, 1);
}

void LibjpegDecompressor::emit_message(j_common_ptr c, int level) {
  Error* e = reinterpret_cast<Error*>(c->err);
  if (level >= 0) return;  // trace messages
  c->err->num_warnings++;
  if (e->warnings_fail) error_exit(c);
}

}  // namespace convoy
