// Resizing a decoded image to the S x S x C sample. Kept apart, and specified exactly, because the
// CUDA twin (gpu_resize.cu) reproduces it bit for bit.
#pragma once
#include <opencv2/core.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

#include "shared/error.h"

namespace convoy {

// crop: the centred square of side min(w, h) (offsets floor((w - side) / 2), floor((h - side) / 2)),
//       resized to S x S; the same as short side to S, then centre crop, without the large
//       intermediate that a very long image would make.
// squash: the whole image resized to S x S.
// short: short side to S, aspect kept (and the long side capped where asked): variable sizes,
//        for batch-file format v2 only (short_side_size and resize_whole below).
enum class ResizePolicy { crop, squash, short_side };
ResizePolicy parse_resize_policy(const std::string& name);  // "crop" | "squash" | "short"
const char* resize_policy_name(ResizePolicy p);

// src: HWC uint8, 1 to 4 channels (datagen gives 1 or 3). dst: S * S * src.channels() bytes.
// Each axis on its own: a shrinking one is antialiased with box (area) weights, the coefficients
// of cv::INTER_AREA; an enlarging one is bilinear (half-pixel centres, edges repeated); an axis
// already of length S is left alone. Fixed-point integers throughout (shared/resize_math.h
// gives the exact formula); only the S x S output is computed. A plain copy when the region is
// already S x S.
// The pixels as a plain view (the loader's crops, which need nothing of OpenCV):
// height x width x channels uint8, `stride` bytes from one row to the next.
struct PixelsIn {
  const uint8_t* data = nullptr;
  int width = 0, height = 0, channels = 0;
  size_t stride = 0;
};
void resize_to_square(const PixelsIn& src, int size, ResizePolicy policy, uint8_t* dst);
// The same for a decoded cv::Mat (datagen's codecs).
inline void resize_to_square(const cv::Mat& src, int size, ResizePolicy policy, uint8_t* dst) {
  if (src.depth() != CV_8U) fail("internal: resize expects 8-bit pixels");
  resize_to_square(PixelsIn{src.data, src.cols, src.rows, src.channels(), src.step[0]}, size, policy, dst);
}

// The size torchvision's Resize(S, max_size=M) gives a width x height image, computed as it
// computes it: the short side becomes S and the long one floor(S x long / short); where that
// exceeds M (> 0), the long side becomes M and the short one floor(M x S / that long side).
struct SideSize {
  int width = 0, height = 0;
};
SideSize short_side_size(int width, int height, int short_side, int max_side);
// The whole of `src` resized to out_w x out_h (HWC, packed rows), each axis as resize_to_square
// resizes it: the same arithmetic, so a square output equals resize_to_square's squash.
void resize_whole(const PixelsIn& src, int out_w, int out_h, uint8_t* dst);
inline void resize_whole(const cv::Mat& src, int out_w, int out_h, uint8_t* dst) {
  if (src.depth() != CV_8U) fail("internal: resize expects 8-bit pixels");
  resize_whole(PixelsIn{src.data, src.cols, src.rows, src.channels(), src.step[0]}, out_w, out_h, dst);
}

// The code path resize_to_square takes on this CPU: "avx2" (chosen at run time), "sse2" (any
// x86-64) or "generic". Every path gives the same bytes.
const char* resize_instruction_set();
// Tests: true makes resize_to_square use the baseline path even where AVX2 is there.
void resize_force_baseline(bool on);

}  // namespace convoy
