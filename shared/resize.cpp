// The CPU resize: crop or squash, then a separable fixed-point resampler straight into the sample's
// slot.
//
// Why not cv::resize, which did this job before: its INTER_AREA at a non-integer ratio (375 -> 256,
// the common ImageNet case) cost about as much as the JPEG decode, and its float arithmetic is hard
// to reproduce bit for bit on the GPU. The resampler here uses the same box (area) coefficients,
// computed once per output row and column as integers (shared/resize_math.h, shared with the
// CUDA kernel). The vertical pass is a loop over whole rows that the compiler vectorises; the
// horizontal pass, a gather the compiler leaves scalar, is written with SSE2 intrinsics for 3
// channels. Both are built twice, for baseline x86-64 and for AVX2, and the CPU picks at run time.
#include "shared/resize.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#if defined(__GNUC__)
#define CONVOY_INLINE inline __attribute__((always_inline))
#else
#define CONVOY_INLINE inline
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#define CONVOY_RESIZE_AVX2 1
#else
#define CONVOY_RESIZE_AVX2 0
#endif
// The vertical loops write int16 and read uint8 rows, which may alias as far as the compiler knows.
#if defined(__clang__)
#define CONVOY_IVDEP _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define CONVOY_IVDEP _Pragma("GCC ivdep")
#else
#define CONVOY_IVDEP
#endif

#include "shared/error.h"
#include "shared/resize_math.h"

namespace convoy {

ResizePolicy parse_resize_policy(const std::string& name) {
  if (name == "crop") return ResizePolicy::crop;
  if (name == "squash") return ResizePolicy::squash;
  if (name == "short") return ResizePolicy::short_side;
  fail("--resize must be crop, squash or short, not '" + name + "'");
}

const char* resize_policy_name(ResizePolicy p) {
  switch (p) {
    case ResizePolicy::crop: return "crop";
    case ResizePolicy::squash: return "squash";
    case ResizePolicy::short_side: return "short";
  }
  return "?";
}

namespace {

AxisPlan axis_plan(int src, int dst) {
  const AxisFilter f = src == dst ? AxisFilter::identity : (src > dst ? AxisFilter::box : AxisFilter::linear);
  return AxisPlan{src, dst, f};
}

}  // namespace

ResizeJob plan_resize_job(int width, int height, int channels, size_t row_stride, int size, ResizePolicy policy) {
  if (policy == ResizePolicy::short_side) fail("internal: --resize short has no square output (resize_whole)");
  if (size <= 0) fail("resize: the sample size must be positive, not " + std::to_string(size));
  if (width <= 0 || height <= 0) fail("resize: empty image");
  if (channels < 1 || channels > 4) fail("resize: " + std::to_string(channels) + " channels");
  if (row_stride < static_cast<size_t>(width) * channels) fail("resize: row stride shorter than a row");

  ResizeJob j{};
  j.channels = channels;
  j.src_stride = static_cast<int32_t>(row_stride);
  j.src_w = width;
  j.src_h = height;
  if (policy == ResizePolicy::crop) {
    const int side = std::min(width, height);
    j.src_offset = static_cast<uint64_t>((height - side) / 2) * row_stride +
                   static_cast<uint64_t>((width - side) / 2) * channels;
    j.src_w = j.src_h = side;
  }
  j.x = axis_plan(j.src_w, size);
  j.y = axis_plan(j.src_h, size);
  j.method = j.src_w == size && j.src_h == size ? ResizeMethod::copy : ResizeMethod::separable;
  return j;
}

namespace {

using namespace rmath;

// The taps of one axis for every output coordinate, padded to the same count (zero weights; at the
// far edge the window moves left so that it stays inside the source), so that the inner loops have
// a trip count known at compile time for the common short filters.
struct AxisTable {
  AxisPlan plan{0, 0, AxisFilter::identity};
  int taps = 0;
  std::vector<int32_t> first;               // per output coordinate
  std::vector<int32_t> weight;              // [output * taps + k]
  std::vector<int32_t> rounding;            // out_rounding() of each output coordinate's weights (as y)
  std::vector<int32_t> nz_first, nz_count;  // the span of nonzero weights among the taps
  // The same weights for the SSE2 horizontal pass over 3 channels: per output and pair of taps,
  // eight int16 (w0 w1 w0 w1 w0 w1 0 0), one pmaddwd operand (16-byte aligned, as operator new
  // aligns on x86-64).
  int pairs = 0;
  std::vector<int16_t> pair_weight;  // [(output * pairs + j) * 8 + lane]
  std::vector<uint32_t> first_c3;    // first * 3: the window's offset in a 3-channel mid row
  // For the AVX2 pass, which takes outputs in blocks of eight and pairs x with x + 4: the vectors
  // of outputs 8b + q and 8b + q + 4 side by side, [((b * 4 + q) * pairs + j) * 16 + half * 8 + lane].
  std::vector<int16_t> pair_weight2;
};

void build_table(const AxisPlan& a, AxisTable& t) {
  t.plan = a;
  t.taps = 1;
  for (int d = 0; d < a.dst_len; ++d) t.taps = std::max(t.taps, int(axis_taps(a, d).count));
  t.first.assign(a.dst_len, 0);
  t.weight.assign(static_cast<size_t>(a.dst_len) * t.taps, 0);
  for (int d = 0; d < a.dst_len; ++d) {
    const TapRange r = axis_taps(a, d);
    const int first = std::min(int(r.first), a.src_len - t.taps);
    t.first[d] = first;
    int32_t* w = &t.weight[static_cast<size_t>(d) * t.taps + (r.first - first)];
    for (int k = 0; k < r.count; ++k) w[k] = axis_weight(a, d, r.first + k);
  }
  t.rounding.assign(a.dst_len, 0);
  t.nz_first.assign(a.dst_len, 0);
  t.nz_count.assign(a.dst_len, 0);
  for (int d = 0; d < a.dst_len; ++d) {
    const int32_t* w = &t.weight[static_cast<size_t>(d) * t.taps];
    int nonzero = 0, lo = t.taps, hi = -1;
    for (int k = 0; k < t.taps; ++k)
      if (w[k] != 0) ++nonzero, lo = std::min(lo, k), hi = k;
    t.rounding[d] = out_rounding(nonzero);
    t.nz_first[d] = lo;
    t.nz_count[d] = hi - lo + 1;
  }
  t.first_c3.assign(a.dst_len, 0);
  for (int d = 0; d < a.dst_len; ++d) t.first_c3[d] = static_cast<uint32_t>(t.first[d]) * 3;
  t.pairs = (t.taps + 1) / 2;
  t.pair_weight.assign(static_cast<size_t>(a.dst_len) * t.pairs * 8, 0);
  t.pair_weight2.assign(static_cast<size_t>(a.dst_len / 8) * 4 * t.pairs * 16, 0);
  for (int d = 0; d < a.dst_len; ++d)
    for (int k = 0; k < t.taps; ++k) {
      const int16_t w = static_cast<int16_t>(t.weight[static_cast<size_t>(d) * t.taps + k]);
      int16_t* v = &t.pair_weight[(static_cast<size_t>(d) * t.pairs + k / 2) * 8];
      for (int c = 0; c < 3; ++c) v[2 * c + k % 2] = w;
      if (d >= a.dst_len / 8 * 8) continue;
      const size_t block_pair = static_cast<size_t>(d / 8) * 4 + d % 4;
      int16_t* v2 = &t.pair_weight2[(block_pair * t.pairs + k / 2) * 16 + (d % 8) / 4 * 8];
      for (int c = 0; c < 3; ++c) v2[2 * c + k % 2] = w;
    }
}

bool same_plan(const AxisPlan& a, const AxisPlan& b) {
  return a.src_len == b.src_len && a.dst_len == b.dst_len && a.filter == b.filter;
}

// A dataset repeats a few shapes over and over, so each thread keeps the tables it made last;
// building one costs a few 64-bit divisions per tap, a noticeable share of a 500x375 image's resize.
// The least recently used table is replaced, so the one just returned for the other axis stays.
class TableCache {
 public:
  const AxisTable& get(const AxisPlan& a) {
    ++clock_;
    for (Entry& e : entries_)
      if (e.used != 0 && same_plan(e.table.plan, a)) {
        e.used = clock_;
        return e.table;
      }
    Entry* oldest = &entries_[0];
    for (Entry& e : entries_)
      if (e.used < oldest->used) oldest = &e;
    build_table(a, oldest->table);
    oldest->used = clock_;
    return oldest->table;
  }

 private:
  struct Entry {
    AxisTable table;
    uint64_t used = 0;  // 0: empty
  };
  std::array<Entry, 4> entries_;
  uint64_t clock_ = 0;
};

// vertical_term(src, w) written as the high half of a 16-bit product, the form GCC vectorises to
// pmulhuw: ((src << 8) * (w << 1)) >> 16 == (src * w) >> 7 for src <= 255 and w <= 2^14.
CONVOY_INLINE uint16_t vertical_term_u16(uint8_t src, uint16_t w2) {
  return static_cast<uint16_t>((static_cast<uint32_t>(static_cast<uint16_t>(src << 8)) * w2) >> 16);
}

// One output row of the vertical pass over n bytes. K fixed at compile time for 1..4 taps.
template <int K>
CONVOY_INLINE void vertical_fixed(const uint8_t* const* rows, const int32_t* w, int n, int16_t* mid) {
  const uint8_t* r[K];
  uint16_t w2[K];
  for (int k = 0; k < K; ++k) r[k] = rows[k], w2[k] = static_cast<uint16_t>(w[k] << 1);
  CONVOY_IVDEP
  for (int i = 0; i < n; ++i) {
    uint16_t s = 0;
    for (int k = 0; k < K; ++k) s = static_cast<uint16_t>(s + vertical_term_u16(r[k][i], w2[k]));
    mid[i] = static_cast<int16_t>(s);
  }
}

// Adds one tap's terms to the mid row, for the rare rows with more than four nonzero taps.
CONVOY_INLINE void vertical_add(const uint8_t* row, int32_t w, int n, int16_t* mid) {
  const uint16_t w2 = static_cast<uint16_t>(w << 1);
  CONVOY_IVDEP
  for (int i = 0; i < n; ++i)
    mid[i] = static_cast<int16_t>(static_cast<uint16_t>(mid[i]) + vertical_term_u16(row[i], w2));
}

// The horizontal pass over `rows` mid rows (1 or 2, which share the tap table): dst_w pixels of CN
// channels each.
struct MidRows {
  const int16_t* mid[2];
  int32_t rounding[2];
  uint8_t* out[2];
  int rows;
};

template <int CN, int K>
CONVOY_INLINE void horizontal_fixed(const MidRows& m, const AxisTable& t) {
  const int n = t.plan.dst_len;
  const int32_t* first = t.first.data();
  const int32_t* weight = t.weight.data();
  for (int r = 0; r < m.rows; ++r)
    for (int x = 0; x < n; ++x) {
      const int16_t* p = m.mid[r] + static_cast<size_t>(first[x]) * CN;
      const int32_t* w = weight + static_cast<size_t>(x) * K;
      for (int c = 0; c < CN; ++c) {
        int32_t s = m.rounding[r];
        for (int k = 0; k < K; ++k) s += w[k] * p[k * CN + c];
        m.out[r][x * CN + c] = out_value(s);
      }
    }
}

template <int CN>
CONVOY_INLINE void horizontal_any(const MidRows& m, const AxisTable& t) {
  const int n = t.plan.dst_len, taps = t.taps;
  for (int r = 0; r < m.rows; ++r)
    for (int x = 0; x < n; ++x) {
      const int16_t* p = m.mid[r] + static_cast<size_t>(t.first[x]) * CN;
      const int32_t* w = t.weight.data() + static_cast<size_t>(x) * taps;
      int32_t s[CN];
      for (int c = 0; c < CN; ++c) s[c] = m.rounding[r];
      for (int k = 0; k < taps; ++k)
        for (int c = 0; c < CN; ++c) s[c] += w[k] * p[k * CN + c];
      for (int c = 0; c < CN; ++c) m.out[r][x * CN + c] = out_value(s[c]);
    }
}

#if defined(__SSE2__)
// The horizontal pass for 3 channels in SSE2 (every x86-64 has it, so no dispatch is needed).
// Written by hand because it is a gather: each output pixel reads its own window of the mid row,
// and the compiler does not vectorise that loop. Per pair of taps: eight int16 from the window,
// interleaved to (t0 t1) per channel, one pmaddwd against (w0 w1) -> the three channel sums; an
// odd last tap is interleaved with zeros instead. The integers are those of horizontal_fixed, so
// the result is the same bit for bit.
template <int kTaps>  // 0: any number, read from the table
CONVOY_INLINE __m128i sse2_c3_sums(const int16_t* p, const __m128i* w, int taps, __m128i sum) {
  const int n = kTaps > 0 ? kTaps : taps;
  int k = 0;
  for (; k + 1 < n; k += 2, ++w) {
    const __m128i t0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 3 * k));
    const __m128i t1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 3 * k + 3));
    sum = _mm_add_epi32(sum, _mm_madd_epi16(_mm_unpacklo_epi16(t0, t1), _mm_load_si128(w)));
  }
  if (k < n) {
    const __m128i t0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 3 * k));
    sum = _mm_add_epi32(sum, _mm_madd_epi16(_mm_unpacklo_epi16(t0, _mm_setzero_si128()), _mm_load_si128(w)));
  }
  return _mm_srai_epi32(sum, kOutShift);
}

// Four pixels' sums, (r g b 0) each, packed to bytes and stored four bytes per pixel; each pixel's
// fourth byte is overwritten by the next pixel.
CONVOY_INLINE void sse2_c3_store4(__m128i s0, __m128i s1, __m128i s2, __m128i s3, uint8_t* o) {
  const __m128i bytes = _mm_packus_epi16(_mm_packs_epi32(s0, s1), _mm_packs_epi32(s2, s3));
  const uint32_t p0 = static_cast<uint32_t>(_mm_cvtsi128_si32(bytes));
  const uint32_t p1 = static_cast<uint32_t>(_mm_cvtsi128_si32(_mm_srli_si128(bytes, 4)));
  const uint32_t p2 = static_cast<uint32_t>(_mm_cvtsi128_si32(_mm_srli_si128(bytes, 8)));
  const uint32_t p3 = static_cast<uint32_t>(_mm_cvtsi128_si32(_mm_srli_si128(bytes, 12)));
  std::memcpy(o, &p0, 4);
  std::memcpy(o + 3, &p1, 4);
  std::memcpy(o + 6, &p2, 4);
  std::memcpy(o + 9, &p3, 4);
}

// Two rows at a time when there are two: they share the window offsets and the weights.
template <int kTaps>
CONVOY_INLINE void horizontal_sse2_c3(const MidRows& m, const AxisTable& t) {
  const int n = t.plan.dst_len, taps = t.taps, pairs = t.pairs;
  const uint32_t* first = t.first_c3.data();
  const __m128i* w = reinterpret_cast<const __m128i*>(t.pair_weight.data());
  const __m128i round0 = _mm_set1_epi32(m.rounding[0]);
  const __m128i round1 = _mm_set1_epi32(m.rounding[1]);
  const int16_t* a = m.mid[0];
  const int16_t* b = m.mid[1];
  int x = 0;
  if (m.rows == 2) {
    for (; x + 4 < n; x += 4, w += 4 * pairs) {
      const __m128i a0 = sse2_c3_sums<kTaps>(a + first[x], w, taps, round0);
      const __m128i b0 = sse2_c3_sums<kTaps>(b + first[x], w, taps, round1);
      const __m128i a1 = sse2_c3_sums<kTaps>(a + first[x + 1], w + pairs, taps, round0);
      const __m128i b1 = sse2_c3_sums<kTaps>(b + first[x + 1], w + pairs, taps, round1);
      const __m128i a2 = sse2_c3_sums<kTaps>(a + first[x + 2], w + 2 * pairs, taps, round0);
      const __m128i b2 = sse2_c3_sums<kTaps>(b + first[x + 2], w + 2 * pairs, taps, round1);
      const __m128i a3 = sse2_c3_sums<kTaps>(a + first[x + 3], w + 3 * pairs, taps, round0);
      const __m128i b3 = sse2_c3_sums<kTaps>(b + first[x + 3], w + 3 * pairs, taps, round1);
      sse2_c3_store4(a0, a1, a2, a3, m.out[0] + 3 * x);
      sse2_c3_store4(b0, b1, b2, b3, m.out[1] + 3 * x);
    }
  } else {
    for (; x + 4 < n; x += 4, w += 4 * pairs)
      sse2_c3_store4(sse2_c3_sums<kTaps>(a + first[x], w, taps, round0),
                     sse2_c3_sums<kTaps>(a + first[x + 1], w + pairs, taps, round0),
                     sse2_c3_sums<kTaps>(a + first[x + 2], w + 2 * pairs, taps, round0),
                     sse2_c3_sums<kTaps>(a + first[x + 3], w + 3 * pairs, taps, round0), m.out[0] + 3 * x);
  }
  // The rest one by one; a row's last pixel writes three bytes, so nothing outside the row is
  // touched.
  for (; x < n; ++x, w += pairs)
    for (int r = 0; r < m.rows; ++r) {
      const __m128i s = sse2_c3_sums<kTaps>(m.mid[r] + first[x], w, taps, r ? round1 : round0);
      const __m128i bytes = _mm_packus_epi16(_mm_packs_epi32(s, s), s);
      const uint32_t p = static_cast<uint32_t>(_mm_cvtsi128_si32(bytes));
      std::memcpy(m.out[r] + 3 * x, &p, x + 1 < n ? 4 : 3);
    }
}
#endif

#if CONVOY_RESIZE_AVX2
// The 3-channel horizontal pass with AVX2: the SSE2 scheme for two neighbouring pixels at once, one
// in each 128-bit half. Same integers.
#define CONVOY_AVX2 __attribute__((target("avx2")))

// Eight int16 from each of two windows, one per 128-bit half.
CONVOY_AVX2 CONVOY_INLINE __m256i avx2_two(const int16_t* p0, const int16_t* p1) {
  return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p0))),
                                 _mm_loadu_si128(reinterpret_cast<const __m128i*>(p1)), 1);
}

template <int kTaps>
CONVOY_AVX2 CONVOY_INLINE __m256i avx2_c3_sums(const int16_t* p0, const int16_t* p1, const __m256i* w, int taps,
                                               __m256i sum) {
  const int n = kTaps > 0 ? kTaps : taps;
  int k = 0;
  for (; k + 1 < n; k += 2, ++w) {
    const __m256i pair = _mm256_unpacklo_epi16(avx2_two(p0 + 3 * k, p1 + 3 * k),
                                               avx2_two(p0 + 3 * k + 3, p1 + 3 * k + 3));
    sum = _mm256_add_epi32(sum, _mm256_madd_epi16(pair, _mm256_loadu_si256(w)));
  }
  if (k < n) {
    const __m256i odd = _mm256_unpacklo_epi16(avx2_two(p0 + 3 * k, p1 + 3 * k), _mm256_setzero_si256());
    sum = _mm256_add_epi32(sum, _mm256_madd_epi16(odd, _mm256_loadu_si256(w)));
  }
  return _mm256_srai_epi32(sum, kOutShift);
}

// Eight pixels' sums (x + q and x + q + 4 in sq) to bytes: packing works within 128-bit halves, so
// the low half ends up with x ... x + 3 and the high half with x + 4 ... x + 7, (r g b 0) each; a
// byte shuffle drops the zeros. Writes 28 bytes: the last four belong to pixels x + 8 and x + 9,
// which are written later.
CONVOY_AVX2 CONVOY_INLINE void avx2_c3_store8(__m256i s0, __m256i s1, __m256i s2, __m256i s3, uint8_t* o) {
  const __m256i rgb0 = _mm256_packus_epi16(_mm256_packs_epi32(s0, s1), _mm256_packs_epi32(s2, s3));
  const __m256i drop = _mm256_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1,  //
                                        0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
  const __m256i rgb = _mm256_shuffle_epi8(rgb0, drop);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(o), _mm256_castsi256_si128(rgb));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 12), _mm256_extracti128_si256(rgb, 1));
}

template <int kTaps>
CONVOY_AVX2 void horizontal_avx2_c3(const MidRows& m, const AxisTable& t) {
  const int n = t.plan.dst_len, taps = t.taps, pairs = t.pairs;
  const uint32_t* first = t.first_c3.data();
  const __m256i* w2 = reinterpret_cast<const __m256i*>(t.pair_weight2.data());
  int x = 0;
  for (int r = 0; r < m.rows; ++r) {
    const int16_t* mid = m.mid[r];
    const __m256i round = _mm256_set1_epi32(m.rounding[r]);
    const __m256i* w = w2;
    // At least two pixels must follow a block, for the four bytes its store writes past its end.
    for (x = 0; x + 9 < n; x += 8, w += 4 * pairs) {
      const uint32_t* f = first + x;
      const __m256i s0 = avx2_c3_sums<kTaps>(mid + f[0], mid + f[4], w, taps, round);
      const __m256i s1 = avx2_c3_sums<kTaps>(mid + f[1], mid + f[5], w + pairs, taps, round);
      const __m256i s2 = avx2_c3_sums<kTaps>(mid + f[2], mid + f[6], w + 2 * pairs, taps, round);
      const __m256i s3 = avx2_c3_sums<kTaps>(mid + f[3], mid + f[7], w + 3 * pairs, taps, round);
      avx2_c3_store8(s0, s1, s2, s3, m.out[r] + 3 * x);
    }
  }
  // The last few pixels as the SSE2 pass does them (the row's last one writes three bytes).
  const __m128i* w = reinterpret_cast<const __m128i*>(t.pair_weight.data()) + static_cast<size_t>(x) * pairs;
  for (; x < n; ++x, w += pairs)
    for (int r = 0; r < m.rows; ++r) {
      const __m128i s = sse2_c3_sums<kTaps>(m.mid[r] + first[x], w, taps, _mm_set1_epi32(m.rounding[r]));
      const __m128i bytes = _mm_packus_epi16(_mm_packs_epi32(s, s), s);
      const uint32_t p = static_cast<uint32_t>(_mm_cvtsi128_si32(bytes));
      std::memcpy(m.out[r] + 3 * x, &p, x + 1 < n ? 4 : 3);
    }
}
#endif

template <int CN>
CONVOY_INLINE void horizontal_cn(const MidRows& m, const AxisTable& t) {
  switch (t.taps) {
    case 1: return horizontal_fixed<CN, 1>(m, t);
    case 2: return horizontal_fixed<CN, 2>(m, t);
    case 3: return horizontal_fixed<CN, 3>(m, t);
    case 4: return horizontal_fixed<CN, 4>(m, t);
  }
  horizontal_any<CN>(m, t);
}

template <bool kAvx2>
CONVOY_INLINE void horizontal(const MidRows& m, const AxisTable& t, int channels) {
  switch (channels) {
    case 1: return horizontal_cn<1>(m, t);
    case 2: return horizontal_cn<2>(m, t);
    case 3:
#if CONVOY_RESIZE_AVX2
      if constexpr (kAvx2) {
        switch (t.taps) {
          case 1: return horizontal_avx2_c3<1>(m, t);
          case 2: return horizontal_avx2_c3<2>(m, t);
          case 3: return horizontal_avx2_c3<3>(m, t);
          case 4: return horizontal_avx2_c3<4>(m, t);
        }
        return horizontal_avx2_c3<0>(m, t);
      }
#endif
#if defined(__SSE2__)
      switch (t.taps) {
        case 1: return horizontal_sse2_c3<1>(m, t);
        case 2: return horizontal_sse2_c3<2>(m, t);
        case 3: return horizontal_sse2_c3<3>(m, t);
        case 4: return horizontal_sse2_c3<4>(m, t);
      }
      return horizontal_sse2_c3<0>(m, t);
#else
      return horizontal_cn<3>(m, t);
#endif
  }
  horizontal_cn<4>(m, t);
}

// The SSE2 pass reads up to 8 int16 from a window's last tap on; zeros there.
constexpr int kMidPadding = 16;

struct Scratch {
  TableCache tables;
  std::vector<int16_t> mid;
};

// Output row y of the vertical pass: only its nonzero taps (a zero weight adds nothing).
CONVOY_INLINE void vertical_row(const AxisTable& ty, int y, const uint8_t* src, size_t stride, int n, int16_t* mid) {
  const int k0 = ty.nz_first[y], count = ty.nz_count[y];
  const int32_t* w = &ty.weight[static_cast<size_t>(y) * ty.taps + k0];
  const uint8_t* first = src + static_cast<size_t>(ty.first[y] + k0) * stride;
  constexpr int kFixed = 4;
  if (count <= kFixed) {
    const uint8_t* rows[kFixed];
    for (int k = 0; k < count; ++k) rows[k] = first + static_cast<size_t>(k) * stride;
    switch (count) {
      case 1: vertical_fixed<1>(rows, w, n, mid); return;
      case 2: vertical_fixed<2>(rows, w, n, mid); return;
      case 3: vertical_fixed<3>(rows, w, n, mid); return;
      case 4: vertical_fixed<4>(rows, w, n, mid); return;
    }
  }
  std::memset(mid, 0, sizeof(int16_t) * n);
  for (int k = 0; k < count; ++k) vertical_add(first + static_cast<size_t>(k) * stride, w[k], n, mid);
}

// Vertical pass, then horizontal pass, two output rows at a time: the integers of
// resize_pixel_cn. Only the S x S output is computed; the mid rows hold the two output rows'
// vertically filtered source rows. Everything is inlined into the entry points below, so each is
// compiled whole for its instruction set.
template <bool kAvx2>
CONVOY_INLINE void resize_separable(const ResizeJob& j, const AxisTable& tx, const AxisTable& ty, const uint8_t* src,
                                    int16_t* mid, uint8_t* dst) {
  const int n = j.src_w * j.channels;
  const size_t mid_row = static_cast<size_t>(n) + kMidPadding;
  const size_t out_row = static_cast<size_t>(j.x.dst_len) * j.channels;
  for (int y = 0; y < j.y.dst_len; y += 2) {
    MidRows m{};
    m.rows = std::min(2, j.y.dst_len - y);
    for (int r = 0; r < 2; ++r) {
      m.mid[r] = mid + r * mid_row;
      m.rounding[r] = ty.rounding[y + (r < m.rows ? r : 0)];
      m.out[r] = dst + (y + (r < m.rows ? r : 0)) * out_row;
    }
    for (int r = 0; r < m.rows; ++r) vertical_row(ty, y + r, src, j.src_stride, n, mid + r * mid_row);
    horizontal<kAvx2>(m, tx, j.channels);
  }
}

using SeparableFn = void (*)(const ResizeJob&, const AxisTable&, const AxisTable&, const uint8_t*, int16_t*, uint8_t*);

void resize_separable_baseline(const ResizeJob& j, const AxisTable& tx, const AxisTable& ty, const uint8_t* src,
                               int16_t* mid, uint8_t* dst) {
  resize_separable<false>(j, tx, ty, src, mid, dst);
}

#if CONVOY_RESIZE_AVX2
// The same code compiled for AVX2, chosen at run time where the CPU has it: the vertical pass is
// vectorised 32 bytes wide, the 3-channel horizontal pass does two pixels per instruction, and the
// SSE2 intrinsics get the three-operand encoding. Same integers.
__attribute__((target("avx2"))) void resize_separable_avx2(const ResizeJob& j, const AxisTable& tx, const AxisTable& ty,
                                                           const uint8_t* src, int16_t* mid, uint8_t* dst) {
  resize_separable<true>(j, tx, ty, src, mid, dst);
}
#endif

std::atomic<bool> g_force_baseline{false};

SeparableFn separable_for_cpu() {
#if CONVOY_RESIZE_AVX2
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2 && !g_force_baseline.load(std::memory_order_relaxed)) return resize_separable_avx2;
#endif
  return resize_separable_baseline;
}

}  // namespace

namespace {

void run_job(const ResizeJob& j, const PixelsIn& src, uint8_t* dst) {
  const uint8_t* region = src.data + j.src_offset;
  if (j.method == ResizeMethod::copy) {
    const size_t row = static_cast<size_t>(j.x.dst_len) * j.channels;
    for (int y = 0; y < j.y.dst_len; ++y)
      std::memcpy(dst + y * row, region + static_cast<size_t>(y) * j.src_stride, row);
    return;
  }
  thread_local Scratch s;
  const AxisTable& tx = s.tables.get(j.x);
  const AxisTable& ty = s.tables.get(j.y);
  s.mid.assign(2 * (static_cast<size_t>(j.src_w) * j.channels + kMidPadding), 0);
  separable_for_cpu()(j, tx, ty, region, s.mid.data(), dst);
}

}  // namespace

void resize_to_square(const PixelsIn& src, int size, ResizePolicy policy, uint8_t* dst) {
  run_job(plan_resize_job(src.width, src.height, src.channels, src.stride, size, policy), src, dst);
}

void resize_whole(const PixelsIn& src, int out_w, int out_h, uint8_t* dst) {
  if (out_w <= 0 || out_h <= 0) fail("resize: the output size must be positive");
  // squash's job for a square of one side, then each axis given its own output length.
  ResizeJob j = plan_resize_job(src.width, src.height, src.channels, src.stride, 1, ResizePolicy::squash);
  j.x = axis_plan(j.src_w, out_w);
  j.y = axis_plan(j.src_h, out_h);
  j.method = j.src_w == out_w && j.src_h == out_h ? ResizeMethod::copy : ResizeMethod::separable;
  run_job(j, src, dst);
}

SideSize short_side_size(int width, int height, int short_side, int max_side) {
  if (width <= 0 || height <= 0 || short_side <= 0) fail("resize: empty image or side");
  const bool wide = width >= height;
  const uint64_t small = uint64_t(wide ? height : width), large = uint64_t(wide ? width : height);
  uint64_t new_short = uint64_t(short_side), new_long = new_short * large / small;
  if (max_side > 0 && new_long > uint64_t(max_side)) {
    new_short = std::max<uint64_t>(1, uint64_t(max_side) * new_short / new_long);
    new_long = uint64_t(max_side);
  }
  if (new_long > uint64_t(1) << 30) fail("resize: the long side would be " + std::to_string(new_long) + " pixels");
  return wide ? SideSize{int(new_long), int(new_short)} : SideSize{int(new_short), int(new_long)};
}

const char* resize_instruction_set() {
  if (separable_for_cpu() != resize_separable_baseline) return "avx2";
#if defined(__SSE2__)
  return "sse2";
#else
  return "generic";
#endif
}

void resize_force_baseline(bool on) { g_force_baseline.store(on, std::memory_order_relaxed); }

}  // namespace convoy
