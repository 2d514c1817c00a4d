// libFuzzer target: arbitrary bytes through the image decoder front end (sniffing, header limits,
// libjpeg and libpng paths), as datagen calls it for every archive member; the centre-square
// decode of a crop must give the whole decode's verdict on the same bytes.
#include <cstddef>
#include <cstdint>
#include <opencv2/core.hpp>

#include "datagen/image_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static convoy::datagen::ImageCodec codec;
  convoy::datagen::DecodeLimits limits;
  limits.max_pixels = 4'000'000;  // keeps each run fast; the guard itself is what is exercised
  // The first byte picks the output channels and the DCT scale request, as datagen's flags would.
  const int channels = size > 0 && (data[0] & 1) ? 1 : 3;
  const int min_short = size > 0 ? (data[0] >> 1) % 4 * 32 : 0;
  bool whole = false, centre = false;
  try {
    const cv::Mat m = codec.decode(data, size, channels, min_short, limits);
    if (m.empty() || m.channels() != channels || m.depth() != CV_8U) __builtin_trap();
    whole = true;
  } catch (const convoy::datagen::RejectError&) {
  }
  try {
    const cv::Mat m = codec.decode_centre(data, size, channels, min_short, limits, {});
    if (m.empty() || m.channels() != channels || m.depth() != CV_8U) __builtin_trap();
    centre = true;
  } catch (const convoy::datagen::RejectError&) {
  }
  if (whole != centre) __builtin_trap();  // a crop would keep what the whole decode refuses, or the reverse
  return 0;
}
