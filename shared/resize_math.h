// The resize's arithmetic, written once: the CPU path (shared/resize.cpp) builds its tap tables
// from it and the CUDA kernel (datagen/gpu_resize.cu) evaluates it per pixel, bit for bit alike.
#pragma once
#include <cstddef>
#include <cstdint>

#include "shared/host_device.h"

namespace convoy {

enum class ResizePolicy;  // shared/resize.h

// The filter of one axis, chosen from that axis alone: a shrinking axis is antialiased, an
// enlarging one interpolated, so a squash that shrinks x and enlarges y gets both.
enum class AxisFilter : int32_t {
  identity,  // same length: each output takes its own source pixel
  box,       // shrink: the mean over the output pixel's footprint, partial pixels by their overlap
             // (the coefficients of cv::INTER_AREA, from exact integers instead of doubles)
  linear,    // enlarge: bilinear with half-pixel centres, edge pixels repeated (as cv::INTER_LINEAR)
};

struct AxisPlan {
  int32_t src_len, dst_len;
  AxisFilter filter;
};

enum class ResizeMethod : int32_t {
  copy,       // the region is already S x S
  separable,  // vertical taps, then horizontal taps, with the rounding below
};

// One image of a batch, as the kernel sees it. Trivial type: copied to the device and into shared
// memory as is.
struct ResizeJob {
  uint64_t src_offset;   // first byte of the region (crop already applied) in the staged input
  uint64_t dst_offset;   // first byte of the S x S x C output
  int32_t src_stride;    // bytes between source rows
  int32_t src_w, src_h;  // region size
  int32_t channels;
  ResizeMethod method;
  AxisPlan x, y;
};

// Plans one image for either path: crop region, method, the two axes. The offsets are left at zero
// for the caller. Throws convoy::Error for policy short and for impossible shapes.
ResizeJob plan_resize_job(int width, int height, int channels, size_t row_stride, int size, ResizePolicy policy);

namespace rmath {

// Weights are integers in units of 2^-14 whose sum over an output pixel's taps is exactly 2^14, so
// a flat area stays exactly flat. Each vertical term keeps 7 fractional bits, truncated: for
// src <= 255 and w <= 2^14 it is the high half of (src << 8) * (w << 1), one SSE2 instruction
// (pmulhuw) for 8 values, and the terms of a tap list add up to at most 255 * 2^7 = 32640, an
// int16. The horizontal pass's sums stay below 32640 * 2^14 + 2^20 + 2^26 < 2^31, and an int16
// pair of them is one pmaddwd.
constexpr int kWeightBits = 14;
constexpr int32_t kWeightOne = 1 << kWeightBits;
constexpr int kMidShift = kWeightBits - 7;  // source * weight -> 7 fractional bits
constexpr int kOutShift = kWeightBits + 7;  // mid * weight -> integer

CONVOY_HD int32_t vertical_term(int32_t src, int32_t w) { return (src * w) >> kMidShift; }

// The constant added before the final shift: one half, plus what the truncated vertical terms of
// the output row lose on average (half a unit of 2^-7 per nonzero term, times the horizontal
// weights' sum 2^14), so that strong shrinks are not darker. Capped where it would stop mattering
// long before the sums could overflow.
CONVOY_HD int32_t out_rounding(int nonzero_vertical_terms) {
  const int n = nonzero_vertical_terms < 8192 ? nonzero_vertical_terms : 8192;
  return (1 << (kOutShift - 1)) + ((n >> 1) << kWeightBits);
}
CONVOY_HD uint8_t out_value(int32_t rounded_sum) {
  const int32_t r = rounded_sum >> kOutShift;
  return static_cast<uint8_t>(r > 255 ? 255 : r);
}

// floor(a / b) for a, b >= 0. Plain 64-bit division when needed; the 32-bit one is much cheaper
// on the GPU and gives the same quotient.
CONVOY_HD uint64_t udiv(uint64_t a, uint64_t b) {
  if ((a >> 32) == 0 && (b >> 32) == 0) return static_cast<uint32_t>(a) / static_cast<uint32_t>(b);
  return a / b;
}

// Source taps [first, first + count) of output coordinate d; all inside [0, src_len).
struct TapRange {
  int32_t first, count;
};

// Box footprint: output d covers source [d * src / dst, (d + 1) * src / dst). Measured in units of
// 1 / dst source pixels it is [d * src, (d + 1) * src), source s is [s * dst, (s + 1) * dst), and
// every bound is an integer.
CONVOY_HD TapRange box_taps(int32_t src, int32_t dst, int d) {
  const uint64_t lo = static_cast<uint64_t>(d) * static_cast<uint64_t>(src);
  const uint64_t hi = lo + static_cast<uint64_t>(src);
  const int32_t first = static_cast<int32_t>(udiv(lo, static_cast<uint64_t>(dst)));
  const int32_t end = static_cast<int32_t>(udiv(hi + static_cast<uint64_t>(dst) - 1, static_cast<uint64_t>(dst)));
  return TapRange{first, end - first};
}

// Rounded cumulative weight of the first c units of a footprint of src units: round(c * 2^14 / src),
// halves up. Each tap's weight is the difference of two of these, so the weights of a pixel add up
// to exactly 2^14 and none is negative.
CONVOY_HD int32_t box_cumulative(uint64_t c, int32_t src) {
  const uint64_t s = static_cast<uint64_t>(src);
  return static_cast<int32_t>(udiv((c << (kWeightBits + 1)) + s, 2 * s));
}

CONVOY_HD int32_t box_weight(int32_t src, int32_t dst, int d, int s) {
  const uint64_t lo = static_cast<uint64_t>(d) * static_cast<uint64_t>(src);
  const uint64_t hi = lo + static_cast<uint64_t>(src);
  uint64_t a = static_cast<uint64_t>(s) * static_cast<uint64_t>(dst);
  uint64_t b = a + static_cast<uint64_t>(dst);
  a = a < lo ? lo : a;
  b = b > hi ? hi : b;
  if (b <= a) return 0;
  return box_cumulative(b - lo, src) - box_cumulative(a - lo, src);
}

// Bilinear position of output d: (d + 0.5) * src / dst - 0.5 = num / den, with num and den integers.
// Left of the first centre or right of the last one, a single tap on the edge pixel.
struct LinearPos {
  int32_t s;   // left source pixel
  int32_t w1;  // weight of s + 1 (units of 2^-14); s alone when single
  bool single;
};
CONVOY_HD LinearPos linear_pos(int32_t src, int32_t dst, int d) {
  const int64_t num = static_cast<int64_t>(2 * static_cast<int64_t>(d) + 1) * src - dst;
  const uint64_t den = 2 * static_cast<uint64_t>(dst);
  LinearPos p{0, 0, true};
  if (num <= 0) return p;
  const uint64_t s = udiv(static_cast<uint64_t>(num), den);
  if (s >= static_cast<uint64_t>(src - 1)) {
    p.s = src - 1;
    return p;
  }
  const uint64_t rem = static_cast<uint64_t>(num) - s * den;
  p.s = static_cast<int32_t>(s);
  p.w1 = static_cast<int32_t>(udiv((rem << (kWeightBits + 1)) + den, 2 * den));  // round(rem / den * 2^14)
  p.single = false;
  return p;
}

CONVOY_HD TapRange axis_taps(const AxisPlan& a, int d) {
  switch (a.filter) {
    case AxisFilter::box: return box_taps(a.src_len, a.dst_len, d);
    case AxisFilter::linear: {
      const LinearPos p = linear_pos(a.src_len, a.dst_len, d);
      return TapRange{p.s, p.single ? 1 : 2};
    }
    case AxisFilter::identity: break;
  }
  return TapRange{d, 1};
}

// Weight (units of 2^-14) of source index s, one of axis_taps(a, d), for output d.
CONVOY_HD int32_t axis_weight(const AxisPlan& a, int d, int s) {
  switch (a.filter) {
    case AxisFilter::box: return box_weight(a.src_len, a.dst_len, d, s);
    case AxisFilter::linear: {
      const LinearPos p = linear_pos(a.src_len, a.dst_len, d);
      if (p.single) return s == p.s ? kWeightOne : 0;
      return s == p.s ? kWeightOne - p.w1 : (s == p.s + 1 ? p.w1 : 0);
    }
    case AxisFilter::identity: break;
  }
  return s == d ? kWeightOne : 0;
}

}  // namespace rmath

// Output pixel (dx, dy), all CN channels, of one job. src points at the job's region. The value is
//   mid_k = sum_i floor(wy_i * src[y_i][x_k] / 2^7)
//   out   = min(255, floor((sum_k wx_k * mid_k + out_rounding(nonzero wy)) / 2^21))
// with integers only, so any evaluation order gives the same bytes: the CPU path runs it as a
// vertical pass over whole rows followed by a horizontal pass, the kernel one pixel per thread. CN
// is a template argument so the per-channel accumulators stay in registers on the device.
template <int CN>
CONVOY_HD void resize_pixel_cn(const ResizeJob& j, const uint8_t* src, int dx, int dy, uint8_t* out) {
  using namespace rmath;
  if (j.method == ResizeMethod::copy) {
    const uint8_t* p = src + static_cast<size_t>(dy) * j.src_stride + static_cast<size_t>(dx) * CN;
    for (int c = 0; c < CN; ++c) out[c] = p[c];
    return;
  }
  const TapRange rx = axis_taps(j.x, dx), ry = axis_taps(j.y, dy);
  // The vertical weights are needed once per horizontal tap; short lists are worked out once.
  constexpr int kCached = 8;
  int32_t wy_cache[kCached];
  const bool cached = ry.count <= kCached;
  int nonzero = 0;
  for (int i = 0; i < ry.count; ++i) {
    const int32_t wy = axis_weight(j.y, dy, ry.first + i);
    nonzero += wy != 0;
    if (cached) wy_cache[i] = wy;
  }
  const int32_t rounding = out_rounding(nonzero);
  int32_t acc[CN];
  for (int c = 0; c < CN; ++c) acc[c] = rounding;
  for (int k = 0; k < rx.count; ++k) {
    const int sx = rx.first + k;
    const int32_t wx = axis_weight(j.x, dx, sx);
    int32_t col[CN];
    for (int c = 0; c < CN; ++c) col[c] = 0;
    for (int i = 0; i < ry.count; ++i) {
      const int sy = ry.first + i;
      const int32_t wy = cached ? wy_cache[i] : axis_weight(j.y, dy, sy);
      const uint8_t* p = src + static_cast<size_t>(sy) * j.src_stride + static_cast<size_t>(sx) * CN;
      for (int c = 0; c < CN; ++c) col[c] += vertical_term(p[c], wy);
    }
    for (int c = 0; c < CN; ++c) acc[c] += wx * col[c];
  }
  for (int c = 0; c < CN; ++c) out[c] = out_value(acc[c]);
}

CONVOY_HD void resize_pixel(const ResizeJob& j, const uint8_t* src, int dx, int dy, uint8_t* out) {
  switch (j.channels) {
    case 1: resize_pixel_cn<1>(j, src, dx, dy, out); return;
    case 2: resize_pixel_cn<2>(j, src, dx, dy, out); return;
    case 3: resize_pixel_cn<3>(j, src, dx, dy, out); return;
    case 4: resize_pixel_cn<4>(j, src, dx, dy, out); return;
  }
}

}  // namespace convoy
