// int4 gradients on the wire: a bucket's all-reduce as an all-to-all of 4-bit blocks (each rank deals
// every other rank its chunk) and an all-gather of the owners' sums, rounded to 4 bits again; the CPU
// reference here (int4_wire.cpp) and its CUDA twin (int4_wire.cu), which GradientSync runs.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "shared/counter_rng.h"
#include "shared/host_device.h"
#include "train/bucket_plan.h"

namespace convoy {

// A block: 32 gradients, each a sign and one of fp4's (e2m1's) eight magnitudes 0, 0.5, 1, 1.5, 2,
// 3, 4, 6 times the block's scale, its largest magnitude / 6 rounded up to bf16 (so that none is
// clipped); two codes to a byte, the first in the low half. Finer steps near zero than a uniform
// grid suit gradients, most of which are far below their block's largest. With its 2-byte scale,
// 0.5625 bytes a gradient.
constexpr size_t kInt4Block = 32;
struct Int4Block {
  uint8_t q[kInt4Block / 2];
  uint16_t scale;  // bf16's bits
};
static_assert(sizeof(Int4Block) == 18, "a block is its 16 bytes of codes and its bf16 scale");
constexpr double kInt4BytesPerGradient = double(sizeof(Int4Block)) / double(kInt4Block);

// A bucket's share of one rank: the bucket [lo, lo + n) of the flat buffer cut into `ranks` chunks of
// `blocks` blocks each (the last ones padded with zeros); chunk j is rank j's to sum.
struct Int4Bucket {
  size_t lo = 0, n = 0;
  int ranks = 1, rank = 0;
  size_t blocks = 0;
  size_t chunk_bytes() const { return blocks * sizeof(Int4Block); }
};
Int4Bucket int4_bucket(const FlatRange& b, int ranks, int rank);

// Bytes one rank sends for a bucket of n gradients: its blocks of every other rank's chunk, then its
// own chunk's sums to every other rank (0 for one rank).
double int4_allreduce_bytes(size_t n, int ranks);
// A step's bytes on the wire, per rank: each bucket as int4 both ways or, with fp8_there (fp8_int4),
// as fp8's reduce-scatter of its padded chunks (a byte a gradient, after its 4-byte scale's
// all-reduce) and int4's all-gather; and the all-reduce of the 4-byte verdict on the step's loss.
double int4_step_wire_bytes(const std::vector<FlatRange>& buckets, int ranks, bool fp8_there);

// The counters of a gradient's draw: the stream (which rank rounds it, and whether as its own
// gradient, 0, or as an owner's sum, 1) and the gradient's index in the flat buffer.
CONVOY_HD uint64_t int4_stream(int rank, int pass) { return uint64_t(rank) * 2 + uint64_t(pass); }

CONVOY_HD uint32_t int4_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  __builtin_memcpy(&u, &x, sizeof u);
  return u;
#endif
}
CONVOY_HD float int4_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  __builtin_memcpy(&x, &u, sizeof x);
  return x;
#endif
}

// A magnitude for the block's largest: any non-finite gradient makes it infinite, so that the block's
// scale is infinite and every value it carries not finite (the update then spreads it, as bf16 would).
CONVOY_HD float int4_magnitude(float x) { return x - x == 0.f ? (x < 0 ? -x : x) : __builtin_huge_valf(); }

// The block's scale from its largest magnitude: max / 6, rounded up to bf16's bits.
CONVOY_HD uint16_t int4_scale_bits(float max) {
  const uint32_t u = int4_bits(max / 6.f);
  return uint16_t((u >> 16) + ((u & 0xffffu) != 0 && (u >> 23) != 0xffu ? 1u : 0u));
}
CONVOY_HD float int4_scale(uint16_t bits) { return int4_float(uint32_t(bits) << 16); }
CONVOY_HD float int4_inverse(float scale) { return scale > 0.f ? 1.f / scale : 0.f; }

// e2m1's magnitude m (0..7) in units of the scale.
CONVOY_HD float int4_magnitude_of(unsigned m) { return m < 4 ? 0.5f * float(m) : m == 7 ? 6.f : float(m - 2); }

// The code of x at 1 / scale: its magnitude between the two neighbouring magnitudes lo and hi, up
// when the draw u in [0, 1) falls below (|t| - lo) / (hi - lo), so that the expected value is x's.
// Every operation but t's product is exact, so host and device agree bit for bit.
CONVOY_HD unsigned int4_code(float x, float inv, float u) {
#if defined(__CUDA_ARCH__)
  const float t = __fmul_rn(x, inv);
#else
  const float t = x * inv;
#endif
  const unsigned sign = t < 0.f ? 8u : 0u;
  float a = t < 0.f ? -t : t;
  if (!(a <= 6.f)) a = 6.f;  // NaN too: a block with a non-finite gradient
  unsigned m;
  float lo, step;
  if (a < 2.f) {
    m = unsigned(2.f * a), lo = 0.5f * float(m), step = 0.5f;
  } else if (a < 4.f) {
    m = unsigned(a) + 2, lo = float(m - 2), step = 1.f;
  } else {
    m = 6, lo = 4.f, step = 2.f;
  }
  if (u < (a - lo) / step) ++m;
  return sign | m;
}

// Value i of a block.
CONVOY_HD float int4_value(const Int4Block& b, size_t i) {
  const unsigned code = (b.q[i / 2] >> (4 * (i % 2))) & 15u;
#if defined(__CUDA_ARCH__)
  const float v = __fmul_rn(int4_magnitude_of(code & 7u), int4_scale(b.scale));
#else
  const float v = int4_magnitude_of(code & 7u) * int4_scale(b.scale);
#endif
  return code & 8u ? -v : v;
}

// The CPU reference of a bucket's three passes (g and sums the flat buffers, indexed from 0), each
// rank's blocks drawn from (key, int4_stream, the gradient's index):
// 1. int4_deal: this rank's gradients of every other rank's chunk j, as blocks at send + j x blocks
//    (its own chunk's place is left alone);
void int4_deal(const Int4Bucket& b, const float* g, uint64_t key, Int4Block* send);
// 2. int4_sum_own: its own chunk's gradients plus what each other rank j dealt it (at recv + j x
//    blocks), summed in rank order and rounded into the chunk's blocks at out;
void int4_sum_own(const Int4Bucket& b, const float* g, const Int4Block* recv, uint64_t key, Int4Block* out);
// 3. int4_widen: every chunk's sums (at all + j x blocks, as the all-gather left them) into sums.
void int4_widen(const Int4Bucket& b, const Int4Block* all, float* sums);
// For fp8_int4, in place of 1 and 2: the owner's chunk of sums x (blocks x 32 values, from fp8's
// reduce-scatter) rounded into its blocks at out, drawn as int4_sum_own's.
void int4_round_chunk(const Int4Bucket& b, const float* x, uint64_t key, Int4Block* out);

// One block from x[0, count) (zeros past count), the draws' counters (stream, first + i).
Int4Block int4_round(const float* x, size_t count, uint64_t key, uint64_t stream, uint64_t first);

}  // namespace convoy

#if CONVOY_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace convoy::gpu {

// The same passes on stream s, the key read from device memory (the step's), the sums in bf16.
void int4_deal(cudaStream_t s, const Int4Bucket& b, const float* g, const uint64_t* key, Int4Block* send);
void int4_sum_own(cudaStream_t s, const Int4Bucket& b, const float* g, const Int4Block* recv, const uint64_t* key,
                  Int4Block* out);
void int4_widen(cudaStream_t s, const Int4Bucket& b, const Int4Block* all, __nv_bfloat16* sums);
void int4_round_chunk(cudaStream_t s, const Int4Bucket& b, const float* x, const uint64_t* key, Int4Block* out);

}  // namespace convoy::gpu
#endif
