// The per-pixel arithmetic of the CUDA resize, written once for the kernel and for the CPU-side test
// that checks it against cv::resize (OpenCV 4.6, uint8) on machines without a GPU.
#pragma once
#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define CONVOY_HD __host__ __device__ __forceinline__
#else
#define CONVOY_HD inline
#endif

namespace convoy::datagen {

enum class ResizePolicy;  // datagen/resize.h

// Which branch of OpenCV's resize the CPU path takes for a given region and size.
enum class ResizeMethod : int32_t {
  copy,       // region is already S x S: cv::Mat::copyTo
  area_fast,  // INTER_AREA, integer scale on both axes: box mean
  area,       // INTER_AREA, both axes shrink: float area weights
  linear,     // INTER_LINEAR: 11-bit fixed-point bilinear, half-pixel centres
};

// One image of a batch, as the kernel sees it. Trivial type: copied to the device and into shared
// memory as is.
struct ResizeJob {
  uint64_t src_offset;  // first byte of the region (crop already applied) in the staged input
  uint64_t dst_offset;  // first byte of the S x S x C output
  int32_t src_stride;   // bytes between source rows
  int32_t src_w, src_h; // region size
  int32_t channels;
  ResizeMethod method;
  int32_t iscale_x, iscale_y;  // area_fast block size
  double scale_x, scale_y;     // source pixels per output pixel, as OpenCV computes them
};

// Plans one image exactly as datagen/resize.cpp and cv::resize would: crop region, method, scales.
// The offsets are left at zero for the caller. Throws convoy::Error for policy short and for shapes
// the CPU path refuses.
ResizeJob plan_resize_job(int width, int height, int channels, size_t row_stride, int size,
                          ResizePolicy policy);

namespace rmath {

// IEEE operations without contraction into FMA, so the device rounds exactly as the x86 CPU code.
CONVOY_HD double dmul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
CONVOY_HD double dadd(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
CONVOY_HD double dsub(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}
CONVOY_HD double ddiv(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
CONVOY_HD float fmul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
CONVOY_HD float fadd(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
CONVOY_HD float fsub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
// cvRound: round half to even, as SSE's cvtss2si does in the default rounding mode.
CONVOY_HD int round_even(float x) {
#if defined(__CUDA_ARCH__)
  return __float2int_rn(x);
#else
  return static_cast<int>(__builtin_lrintf(x));
#endif
}
CONVOY_HD int floor_int(double x) {
#if defined(__CUDA_ARCH__)
  return static_cast<int>(::floor(x));
#else
  return static_cast<int>(__builtin_floor(x));
#endif
}
CONVOY_HD int ceil_int(double x) {
#if defined(__CUDA_ARCH__)
  return static_cast<int>(::ceil(x));
#else
  return static_cast<int>(__builtin_ceil(x));
#endif
}
CONVOY_HD int floor_intf(float x) {
#if defined(__CUDA_ARCH__)
  return static_cast<int>(::floorf(x));
#else
  return static_cast<int>(__builtin_floorf(x));
#endif
}
CONVOY_HD int imin(int a, int b) { return a < b ? a : b; }
CONVOY_HD int imax(int a, int b) { return a > b ? a : b; }
CONVOY_HD double dmin(double a, double b) { return a < b ? a : b; }
CONVOY_HD uint8_t sat_u8(int v) { return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v)); }
CONVOY_HD int16_t sat_s16(int v) {
  return static_cast<int16_t>(v < -32768 ? -32768 : (v > 32767 ? 32767 : v));
}

constexpr int kCoefBits = 11;  // INTER_RESIZE_COEF_BITS
constexpr int kCoefScale = 1 << kCoefBits;

// INTER_LINEAR taps of one output coordinate: source index and the two 11-bit weights. clamp_edges
// is OpenCV's treatment of x (index and weight pinned at the borders); along y it keeps the raw
// index and weights and clamps only the rows it reads.
struct LinearTap {
  int s;
  int16_t w0, w1;
};
CONVOY_HD LinearTap linear_tap(int d, double scale, int src_len, bool clamp_edges) {
  float f = static_cast<float>(dsub(dmul(dadd(static_cast<double>(d), 0.5), scale), 0.5));
  int s = floor_intf(f);
  f = fsub(f, static_cast<float>(s));
  if (clamp_edges) {
    if (s < 0) f = 0.f, s = 0;
    if (s >= src_len - 1) f = 0.f, s = src_len - 1;
  }
  LinearTap t;
  t.s = s;
  t.w0 = sat_s16(round_even(fmul(fsub(1.f, f), static_cast<float>(kCoefScale))));
  t.w1 = sat_s16(round_even(fmul(f, static_cast<float>(kCoefScale))));
  return t;
}

// OpenCV's vertical pass for uint8 (VResizeLinearVec_32s8u, the SIMD path that covers all but the
// last few bytes of a row): weights applied to the horizontal sums pre-shifted by 4, high halves
// of the 16-bit products, then a rounding shift by 2. The scalar tail rounds
// (h0 * b0 + h1 * b1 + 2^21) >> 22 instead; the two differ by at most 1.
CONVOY_HD uint8_t linear_vertical(int h0, int h1, int16_t b0, int16_t b1) {
  int p0 = (static_cast<int>(sat_s16(h0 >> 4)) * b0) >> 16;
  int p1 = (static_cast<int>(sat_s16(h1 >> 4)) * b1) >> 16;
  return sat_u8((p0 + p1 + 2) >> 2);
}

// INTER_AREA weights of one output coordinate (computeResizeAreaTab for a single index): an
// optional partial first cell, whole cells, an optional partial last cell.
struct AreaSpan {
  int first, last;  // inclusive source range
  int mid_begin, mid_end;  // whole cells [mid_begin, mid_end)
  float w_first, w_mid, w_last;
};
CONVOY_HD AreaSpan area_span(int d, double scale, int src_len) {
  double f1 = dmul(static_cast<double>(d), scale);
  double f2 = dadd(f1, scale);
  double cell = dmin(scale, dsub(static_cast<double>(src_len), f1));
  int s1 = ceil_int(f1), s2 = floor_int(f2);
  s2 = imin(s2, src_len - 1);
  s1 = imin(s1, s2);
  AreaSpan a;
  a.mid_begin = s1;
  a.mid_end = s2;
  a.w_mid = static_cast<float>(ddiv(1.0, cell));
  a.first = s1;
  a.w_first = 0.f;
  if (dsub(static_cast<double>(s1), f1) > 1e-3) {
    a.first = s1 - 1;
    a.w_first = static_cast<float>(ddiv(dsub(static_cast<double>(s1), f1), cell));
  }
  a.last = s2 - 1;
  a.w_last = 0.f;
  double tail = dsub(f2, static_cast<double>(s2));
  if (tail > 1e-3) {
    a.last = s2;
    a.w_last = static_cast<float>(ddiv(dmin(dmin(tail, 1.0), cell), cell));
  }
  return a;
}
CONVOY_HD float area_weight(const AreaSpan& a, int s) {
  if (s < a.mid_begin) return a.w_first;
  if (s < a.mid_end) return a.w_mid;
  return a.w_last;
}

}  // namespace rmath

// Output pixel (dx, dy), all CN channels, of one job. src points at the job's region. CN is a
// template argument so the per-channel accumulators stay in registers on the device.
template <int CN>
CONVOY_HD void resize_pixel_cn(const ResizeJob& j, const uint8_t* src, int dx, int dy, uint8_t* out) {
  using namespace rmath;
  constexpr int cn = CN;
  switch (j.method) {
    case ResizeMethod::copy: {
      const uint8_t* p = src + static_cast<size_t>(dy) * j.src_stride + static_cast<size_t>(dx) * cn;
      for (int c = 0; c < cn; ++c) out[c] = p[c];
      return;
    }
    case ResizeMethod::area_fast: {
      const int sx0 = dx * j.iscale_x, sy0 = dy * j.iscale_y;
      const int area = j.iscale_x * j.iscale_y;
      // ResizeAreaFastVec rounds 2x2 boxes of 1, 3 or 4 channels with (sum + 2) >> 2; every other
      // box goes through a float multiply by 1/area and cvRound.
      const bool quad = j.iscale_x == 2 && j.iscale_y == 2 && (cn == 1 || cn == 3 || cn == 4);
      const float inv_area = 1.f / static_cast<float>(area);
      for (int c = 0; c < cn; ++c) {
        int sum = 0;
        for (int y = 0; y < j.iscale_y; ++y) {
          const uint8_t* row = src + static_cast<size_t>(sy0 + y) * j.src_stride + c;
          for (int x = 0; x < j.iscale_x; ++x) sum += row[static_cast<size_t>(sx0 + x) * cn];
        }
        out[c] = quad ? static_cast<uint8_t>((sum + 2) >> 2)
                      : sat_u8(round_even(fmul(static_cast<float>(sum), inv_area)));
      }
      return;
    }
    case ResizeMethod::area: {
      const AreaSpan ax = area_span(dx, j.scale_x, j.src_w);
      const AreaSpan ay = area_span(dy, j.scale_y, j.src_h);
      float acc[CN] = {};
      // Same order of float operations as ResizeArea_Invoker: each source row is weighted along
      // x first, then added into the output with its y weight.
      for (int sy = ay.first; sy <= ay.last; ++sy) {
        const float beta = area_weight(ay, sy);
        const uint8_t* row = src + static_cast<size_t>(sy) * j.src_stride;
        float sum[CN] = {};
        for (int sx = ax.first; sx <= ax.last; ++sx) {
          const float alpha = area_weight(ax, sx);
          const uint8_t* p = row + static_cast<size_t>(sx) * cn;
          for (int c = 0; c < cn; ++c) sum[c] = fadd(sum[c], fmul(static_cast<float>(p[c]), alpha));
        }
        for (int c = 0; c < cn; ++c) acc[c] = fadd(acc[c], fmul(beta, sum[c]));
      }
      for (int c = 0; c < cn; ++c) out[c] = sat_u8(round_even(acc[c]));
      return;
    }
    case ResizeMethod::linear: {
      const LinearTap tx = linear_tap(dx, j.scale_x, j.src_w, true);
      const LinearTap ty = linear_tap(dy, j.scale_y, j.src_h, false);
      const int y0 = imin(imax(ty.s, 0), j.src_h - 1), y1 = imin(imax(ty.s + 1, 0), j.src_h - 1);
      const int x1 = imin(tx.s + 1, j.src_w - 1);
      const uint8_t* r0 = src + static_cast<size_t>(y0) * j.src_stride;
      const uint8_t* r1 = src + static_cast<size_t>(y1) * j.src_stride;
      const size_t o0 = static_cast<size_t>(tx.s) * cn, o1 = static_cast<size_t>(x1) * cn;
      for (int c = 0; c < cn; ++c) {
        const int h0 = r0[o0 + c] * tx.w0 + r0[o1 + c] * tx.w1;
        const int h1 = r1[o0 + c] * tx.w0 + r1[o1 + c] * tx.w1;
        out[c] = linear_vertical(h0, h1, ty.w0, ty.w1);
      }
      return;
    }
  }
}

CONVOY_HD void resize_pixel(const ResizeJob& j, const uint8_t* src, int dx, int dy, uint8_t* out) {
  switch (j.channels) {
    case 1: resize_pixel_cn<1>(j, src, dx, dy, out); return;
    case 2: resize_pixel_cn<2>(j, src, dx, dy, out); return;
    case 3: resize_pixel_cn<3>(j, src, dx, dy, out); return;
    case 4: resize_pixel_cn<4>(j, src, dx, dy, out); return;
  }
}

}  // namespace convoy::datagen
