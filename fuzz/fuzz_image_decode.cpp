// libFuzzer target: arbitrary bytes through the image decoder front end (sniffing, header limits,
// TurboJPEG and libpng paths), as datagen calls it for every archive member.
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
  try {
    const cv::Mat m = codec.decode(data, size, channels, min_short, limits);
    if (m.empty() || m.channels() != channels || m.depth() != CV_8U) __builtin_trap();
  } catch (const convoy::datagen::RejectError&) {
  }
  return 0;
}
