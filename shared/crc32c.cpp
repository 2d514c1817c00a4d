// CRC32C: SSE4.2 path (three interleaved crc32 streams) and a table fallback. No Debian package
// provides CRC32C for C++, so this one function lives here.
#include "shared/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace convoy {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[i] = c;
  }
  return t;
}

uint32_t crc_table(const uint8_t* p, size_t n, uint32_t c) {
  static const std::array<uint32_t, 256> table = make_table();
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c;
}

#if defined(__x86_64__)
// One stream: each crc32 instruction waits for the one before (3 cycles for 8 bytes).
uint32_t crc_sse42_serial(const uint8_t* p, size_t n, uint32_t c) {
  uint64_t c64 = c;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c64 = _mm_crc32_u64(c64, v);
    p += 8;
    n -= 8;
  }
  c = static_cast<uint32_t>(c64);
  while (n--) c = _mm_crc32_u8(c, *p++);
  return c;
}

// The register after `bytes` zero bytes, as a linear map of the register before: the images of
// its 32 bits. Appending data B to A gives shift(crc(A), |B|) ^ crc(B) on the raw register.
struct Shift {
  uint32_t column[32];
  explicit Shift(size_t bytes) {
    static const uint8_t zeros[8192] = {};
    for (int i = 0; i < 32; ++i) {
      uint32_t c = 1u << i;
      for (size_t left = bytes; left > 0;) {
        const size_t k = left < sizeof zeros ? left : sizeof zeros;
        c = crc_sse42_serial(zeros, k, c);
        left -= k;
      }
      column[i] = c;
    }
  }
  uint32_t operator()(uint32_t c) const {
    uint32_t r = 0;
    for (int i = 0; i < 32; ++i) r ^= column[i] & (0u - ((c >> i) & 1u));
    return r;
  }
};

// Three independent streams over thirds of a block keep three crc32 instructions in flight,
// then the thirds are joined with Shift.
template <size_t kStream>
const uint8_t* crc_sse42_3way(const uint8_t* p, size_t& n, uint32_t& c) {
  static const Shift shift(kStream);
  while (n >= 3 * kStream) {
    uint64_t c0 = c, c1 = 0, c2 = 0;
    for (size_t i = 0; i < kStream; i += 8) {
      uint64_t v0, v1, v2;
      std::memcpy(&v0, p + i, 8);
      std::memcpy(&v1, p + kStream + i, 8);
      std::memcpy(&v2, p + 2 * kStream + i, 8);
      c0 = _mm_crc32_u64(c0, v0);
      c1 = _mm_crc32_u64(c1, v1);
      c2 = _mm_crc32_u64(c2, v2);
    }
    c = shift(shift(uint32_t(c0)) ^ uint32_t(c1)) ^ uint32_t(c2);
    p += 3 * kStream;
    n -= 3 * kStream;
  }
  return p;
}

uint32_t crc_sse42(const uint8_t* p, size_t n, uint32_t c) {
  p = crc_sse42_3way<8192>(p, n, c);
  p = crc_sse42_3way<256>(p, n, c);
  return crc_sse42_serial(p, n, c);
}
#endif

// The raw register (no inversions) extended over n zero bytes.
uint32_t raw_over_zeros(uint32_t c, size_t n) {
  static const uint8_t zeros[8192] = {};
  for (size_t left = n; left > 0;) {
    const size_t k = left < sizeof zeros ? left : sizeof zeros;
#if defined(__x86_64__)
    static const bool hw = __builtin_cpu_supports("sse4.2");
    c = hw ? crc_sse42(zeros, k, c) : crc_table(zeros, k, c);
#else
    c = crc_table(zeros, k, c);
#endif
    left -= k;
  }
  return c;
}

}  // namespace

// The register is linear in its start value over zero bytes, and crc32c(A || B) works out to
// zeros_B(crc32c(A)) ^ crc32c(B), where zeros_B is that linear map over |B| zero bytes.
Crc32cAppend::Crc32cAppend(size_t piece_bytes) {
  for (int i = 0; i < 32; ++i) column_[i] = raw_over_zeros(1u << i, piece_bytes);
}

uint32_t Crc32cAppend::operator()(uint32_t crc_a, uint32_t crc_b) const {
  uint32_t r = 0;
  for (int i = 0; i < 32; ++i) r ^= column_[i] & (0u - ((crc_a >> i) & 1u));
  return r ^ crc_b;
}

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
#if defined(__x86_64__)
  static const bool hw = __builtin_cpu_supports("sse4.2");
  c = hw ? crc_sse42(p, n, c) : crc_table(p, n, c);
#else
  c = crc_table(p, n, c);
#endif
  return ~c;
}

}  // namespace convoy
