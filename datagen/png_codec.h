// PNG decoding and encoding through libpng's simplified API, so that datagen needs no image-file
// library beyond libpng and TurboJPEG (OpenCV's imgcodecs pulls in ~100 shared libraries).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include <opencv2/core.hpp>

namespace convoy::datagen {

// Width and height from the IHDR chunk, read without decoding; throws RejectError when the data
// does not start with a PNG signature and an IHDR.
void png_dimensions(const uint8_t* data, size_t n, uint32_t& width, uint32_t& height);

// Decodes any PNG (1-16 bits, gray, RGB, palette, with or without alpha) to CV_8UC1 for gray files
// or CV_8UC3 in RGB order for colour and palette files. Alpha is dropped, 16-bit samples are scaled
// to 8 bits with rounding (v / 257). Throws RejectError for damaged or cut-short data: libpng's
// errors, and a chunk whose CRC does not match (libpng checks IDAT's too, which PIL does not).
cv::Mat png_decode(const uint8_t* data, size_t n);

// Encodes 8-bit gray (channels 1) or RGB (channels 3) pixels, rows packed; throws convoy::Error.
std::string png_encode(const uint8_t* pixels, int width, int height, int channels);

}  // namespace convoy::datagen
