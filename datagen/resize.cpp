// The CPU resize: crop or squash, then a separable fixed-point resampler straight into the sample's
// slot.
//
// Why not cv::resize, which did this job before: its INTER_AREA at a non-integer ratio (375 -> 256,
// the common ImageNet case) cost about as much as the JPEG decode, and its float arithmetic is hard
// to reproduce bit for bit on the GPU. The resampler here uses the same box (area) coefficients,
// computed once per output row and column as integers (datagen/gpu_resize_math.h, shared with the
// CUDA kernel), and loops over whole rows that the compiler vectorises with plain SSE2.
#include "datagen/resize.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "datagen/gpu_resize_math.h"
#include "shared/error.h"

namespace convoy::datagen {

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

ResizeJob plan_resize_job(int width, int height, int channels, size_t row_stride, int size,
                          ResizePolicy policy) {
  if (policy == ResizePolicy::short_side)
    fail("--resize short gives variable sizes and cannot fill a raw batch file");
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
  std::vector<int32_t> first;   // per output coordinate
  std::vector<int32_t> weight;  // [output * taps + k]
  std::vector<int32_t> rounding;  // out_rounding() of each output coordinate's weights (as y)
  // The same weights for the SSE2 horizontal pass over 3 channels: per output and pair of taps,
  // eight int16 (w0 w1 w0 w1 w0 w1 0 0), one pmaddwd operand.
  int pairs = 0;
  std::vector<int16_t> pair_weight;  // [(output * pairs + j) * 8 + lane]
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
  for (int d = 0; d < a.dst_len; ++d) {
    int nonzero = 0;
    for (int k = 0; k < t.taps; ++k) nonzero += t.weight[static_cast<size_t>(d) * t.taps + k] != 0;
    t.rounding[d] = out_rounding(nonzero);
  }
  t.pairs = (t.taps + 1) / 2;
  t.pair_weight.assign(static_cast<size_t>(a.dst_len) * t.pairs * 8, 0);
  for (int d = 0; d < a.dst_len; ++d)
    for (int k = 0; k < t.taps; ++k) {
      int16_t* v = &t.pair_weight[(static_cast<size_t>(d) * t.pairs + k / 2) * 8];
      for (int c = 0; c < 3; ++c) v[2 * c + k % 2] = static_cast<int16_t>(t.weight[static_cast<size_t>(d) * t.taps + k]);
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
inline uint16_t vertical_term_u16(uint8_t src, uint16_t w2) {
  return static_cast<uint16_t>((static_cast<uint32_t>(static_cast<uint16_t>(src << 8)) * w2) >> 16);
}

// One output row of the vertical pass over n bytes. K fixed at compile time for 1..4 taps.
template <int K>
void vertical_fixed(const uint8_t* const* rows, const int32_t* w, int n, int16_t* mid) {
  const uint8_t* r[K];
  uint16_t w2[K];
  for (int k = 0; k < K; ++k) r[k] = rows[k], w2[k] = static_cast<uint16_t>(w[k] << 1);
#pragma GCC ivdep
  for (int i = 0; i < n; ++i) {
    uint16_t s = 0;
    for (int k = 0; k < K; ++k) s = static_cast<uint16_t>(s + vertical_term_u16(r[k][i], w2[k]));
    mid[i] = static_cast<int16_t>(s);
  }
}

void vertical_any(const uint8_t* const* rows, const int32_t* w, int taps, int n, int16_t* mid) {
  std::memset(mid, 0, sizeof(int16_t) * n);
  for (int k = 0; k < taps; ++k) {
    const uint8_t* r = rows[k];
    const uint16_t w2 = static_cast<uint16_t>(w[k] << 1);
    if (w2 == 0) continue;
#pragma GCC ivdep
    for (int i = 0; i < n; ++i) mid[i] = static_cast<int16_t>(static_cast<uint16_t>(mid[i]) + vertical_term_u16(r[i], w2));
  }
}

// One output row of the horizontal pass: dst_w pixels of CN channels from the mid row.
template <int CN, int K>
void horizontal_fixed(const int16_t* mid, const AxisTable& t, int32_t rounding, uint8_t* out) {
  const int n = t.plan.dst_len;
  const int32_t* first = t.first.data();
  const int32_t* weight = t.weight.data();
  for (int x = 0; x < n; ++x) {
    const int16_t* p = mid + static_cast<size_t>(first[x]) * CN;
    const int32_t* w = weight + static_cast<size_t>(x) * K;
    for (int c = 0; c < CN; ++c) {
      int32_t s = rounding;
      for (int k = 0; k < K; ++k) s += w[k] * p[k * CN + c];
      out[x * CN + c] = out_value(s);
    }
  }
}

template <int CN>
void horizontal_any(const int16_t* mid, const AxisTable& t, int32_t rounding, uint8_t* out) {
  const int n = t.plan.dst_len, taps = t.taps;
  for (int x = 0; x < n; ++x) {
    const int16_t* p = mid + static_cast<size_t>(t.first[x]) * CN;
    const int32_t* w = t.weight.data() + static_cast<size_t>(x) * taps;
    int32_t s[CN];
    for (int c = 0; c < CN; ++c) s[c] = rounding;
    for (int k = 0; k < taps; ++k)
      for (int c = 0; c < CN; ++c) s[c] += w[k] * p[k * CN + c];
    for (int c = 0; c < CN; ++c) out[x * CN + c] = out_value(s[c]);
  }
}

#if defined(__SSE2__)
// The horizontal pass for 3 channels in SSE2 (every x86-64 has it, so no dispatch is needed).
// Written by hand because it is a gather: each output pixel reads its own window of the mid row,
// and the compiler does not vectorise that loop. Per pair of taps: eight int16 from the window,
// interleaved to (t0 t1) per channel, one pmaddwd against (w0 w1) -> the three channel sums. The
// integers are those of horizontal_fixed, so the result is the same bit for bit.
template <int kPairs>  // 0: any number, read from the table
void horizontal_sse2_c3(const int16_t* mid, const AxisTable& t, int32_t rounding, uint8_t* out) {
  const int n = t.plan.dst_len, pairs = kPairs > 0 ? kPairs : t.pairs;
  const int32_t* first = t.first.data();
  const __m128i* w = reinterpret_cast<const __m128i*>(t.pair_weight.data());
  const __m128i round = _mm_set1_epi32(rounding);
  for (int x = 0; x < n; ++x, w += pairs) {
    const int16_t* p = mid + static_cast<size_t>(first[x]) * 3;
    __m128i sum = round;
    for (int j = 0; j < pairs; ++j) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 6 * j));
      const __m128i pair = _mm_unpacklo_epi16(v, _mm_srli_si128(v, 6));
      sum = _mm_add_epi32(sum, _mm_madd_epi16(pair, _mm_loadu_si128(w + j)));
    }
    sum = _mm_srai_epi32(sum, kOutShift);
    sum = _mm_packus_epi16(_mm_packs_epi32(sum, sum), sum);
    const uint32_t rgb0 = static_cast<uint32_t>(_mm_cvtsi128_si32(sum));
    // Four bytes at a time; the fourth is overwritten by the next pixel, and the row's last pixel
    // writes only three, so nothing outside the row is touched.
    if (x + 1 < n)
      std::memcpy(out + 3 * x, &rgb0, 4);
    else
      std::memcpy(out + 3 * x, &rgb0, 3);
  }
}
#endif

using HorizontalFn = void (*)(const int16_t*, const AxisTable&, int32_t, uint8_t*);

template <int CN>
HorizontalFn horizontal_for_cn(int taps) {
  switch (taps) {
    case 1: return horizontal_fixed<CN, 1>;
    case 2: return horizontal_fixed<CN, 2>;
    case 3: return horizontal_fixed<CN, 3>;
    case 4: return horizontal_fixed<CN, 4>;
  }
  return horizontal_any<CN>;
}

HorizontalFn horizontal_for(int channels, int taps) {
  switch (channels) {
    case 1: return horizontal_for_cn<1>(taps);
    case 2: return horizontal_for_cn<2>(taps);
#if defined(__SSE2__)
    case 3: return taps <= 2 ? horizontal_sse2_c3<1> : (taps <= 4 ? horizontal_sse2_c3<2> : horizontal_sse2_c3<0>);
#else
    case 3: return horizontal_for_cn<3>(taps);
#endif
  }
  return horizontal_for_cn<4>(taps);
}

// The SSE2 pass reads up to one pair of taps (8 int16) past a window's last tap; zeros there.
constexpr int kMidPadding = 16;

struct Scratch {
  TableCache tables;
  std::vector<int16_t> mid;
  std::vector<const uint8_t*> rows;
};

// Vertical pass, then horizontal pass, a row at a time: the integers of resize_pixel_cn. Only the
// S x S output is computed; the mid row holds one output row's vertically filtered source row.
void resize_separable(const ResizeJob& j, const uint8_t* src, uint8_t* dst) {
  thread_local Scratch s;
  const AxisTable& tx = s.tables.get(j.x);
  const AxisTable& ty = s.tables.get(j.y);
  const int n = j.src_w * j.channels;
  s.mid.assign(static_cast<size_t>(n) + kMidPadding, 0);
  s.rows.resize(ty.taps);
  const HorizontalFn horizontal = horizontal_for(j.channels, tx.taps);
  const size_t out_row = static_cast<size_t>(j.x.dst_len) * j.channels;
  for (int y = 0; y < j.y.dst_len; ++y) {
    const int32_t* w = &ty.weight[static_cast<size_t>(y) * ty.taps];
    for (int k = 0; k < ty.taps; ++k) s.rows[k] = src + static_cast<size_t>(ty.first[y] + k) * j.src_stride;
    switch (ty.taps) {
      case 1: vertical_fixed<1>(s.rows.data(), w, n, s.mid.data()); break;
      case 2: vertical_fixed<2>(s.rows.data(), w, n, s.mid.data()); break;
      case 3: vertical_fixed<3>(s.rows.data(), w, n, s.mid.data()); break;
      case 4: vertical_fixed<4>(s.rows.data(), w, n, s.mid.data()); break;
      default: vertical_any(s.rows.data(), w, ty.taps, n, s.mid.data());
    }
    horizontal(s.mid.data(), tx, ty.rounding[y], dst + y * out_row);
  }
}

}  // namespace

void resize_to_square(const cv::Mat& src, int size, ResizePolicy policy, uint8_t* dst) {
  if (src.depth() != CV_8U) fail("internal: resize expects 8-bit pixels");
  const ResizeJob j = plan_resize_job(src.cols, src.rows, src.channels(), src.step[0], size, policy);
  const uint8_t* region = src.data + j.src_offset;
  if (j.method == ResizeMethod::copy) {
    const size_t row = static_cast<size_t>(size) * j.channels;
    for (int y = 0; y < size; ++y) std::memcpy(dst + y * row, region + static_cast<size_t>(y) * j.src_stride, row);
    return;
  }
  resize_separable(j, region, dst);
}

}  // namespace convoy::datagen
