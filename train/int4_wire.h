// int4 gradients on the wire: a bucket's all-reduce as an all-to-all of 4-bit blocks (each rank deals
// every other rank its chunk) and an all-gather of the owners' sums, rounded to 4 bits again; the CPU
// reference here (int4_wire.cpp) and its CUDA twin (int4_wire.cu), which GradientSync runs.
#pragma once
#include <cstddef>
#include <cstdint>

#include "shared/counter_rng.h"
#include "train/bucket_plan.h"

#if defined(__CUDACC__)
#define CONVOY_INT4_HD __host__ __device__ __forceinline__
#else
#define CONVOY_INT4_HD inline
#endif

namespace convoy {

// A block: 64 gradients, each one of the 15 steps -7..7 of the block's own scale (its largest
// magnitude / 7), two to a byte offset by 8. With its 4-byte scale, 0.5625 bytes a gradient.
constexpr size_t kInt4Block = 64;
struct Int4Block {
  uint8_t q[kInt4Block / 2];
  float scale;
};
static_assert(sizeof(Int4Block) == 36, "a block is its 32 bytes of steps and its scale");
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

// The counters of a gradient's draw: the stream (which rank rounds it, and whether as its own
// gradient, 0, or as an owner's sum, 1) and the gradient's index in the flat buffer.
CONVOY_INT4_HD uint64_t int4_stream(int rank, int pass) { return uint64_t(rank) * 2 + uint64_t(pass); }

// A magnitude for the block's largest: any non-finite gradient makes it infinite, so that the block's
// scale is infinite and every value it carries not finite (the update then spreads it, as bf16 would).
CONVOY_INT4_HD float int4_magnitude(float x) { return x - x == 0.f ? (x < 0 ? -x : x) : __builtin_huge_valf(); }

// The step of x at 7 / (the block's largest magnitude), rounded down after adding the draw u in
// [0, 1): up with probability equal to the fraction, so the expected step is x's. Written as
// separate rounded operations, so that host and device agree bit for bit.
CONVOY_INT4_HD int int4_level(float x, float inv, float u) {
#if defined(__CUDA_ARCH__)
  const float t = __fadd_rn(__fmul_rn(x, inv), u);
  const float f = floorf(t);
#else
  const float t = x * inv + u;
  const float f = __builtin_floorf(t);
#endif
  if (!(f >= -7.f)) return -7;  // NaN too: a block with a non-finite gradient
  return f > 7.f ? 7 : int(f);
}

CONVOY_INT4_HD float int4_inverse(float max) { return max > 0.f ? 7.f / max : 0.f; }
CONVOY_INT4_HD float int4_scale(float max) { return max / 7.f; }

// Value i of a block.
CONVOY_INT4_HD float int4_value(const Int4Block& b, size_t i) {
  const int level = int((b.q[i / 2] >> (4 * (i % 2))) & 15) - 8;
#if defined(__CUDA_ARCH__)
  return __fmul_rn(float(level), b.scale);
#else
  return float(level) * b.scale;
#endif
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

}  // namespace convoy::gpu
#endif
