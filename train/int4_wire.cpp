// The int4 wire's chunking, bytes and CPU reference (int4_wire.h): what the CUDA twin must match bit
// for bit, block by block, and what the tests without a GPU check the rounding on.
#include "train/int4_wire.h"

#include <algorithm>

namespace convoy {

Int4Bucket int4_bucket(const FlatRange& r, int ranks, int rank) {
  Int4Bucket b;
  b.lo = r.lo;
  b.n = r.size();
  b.ranks = std::max(1, ranks);
  b.rank = rank;
  const size_t blocks = (b.n + kInt4Block - 1) / kInt4Block;
  b.blocks = (blocks + size_t(b.ranks) - 1) / size_t(b.ranks);
  return b;
}

double int4_allreduce_bytes(size_t n, int ranks) {
  if (ranks < 2) return 0;
  return 2.0 * double(ranks - 1) * double(int4_bucket({0, n}, ranks, 0).chunk_bytes());
}

double int4_step_wire_bytes(const std::vector<FlatRange>& buckets, int ranks, bool fp8_there) {
  double bytes = ring_allreduce_bytes(sizeof(uint32_t), ranks);
  for (const FlatRange& r : buckets) {
    const double gather = int4_allreduce_bytes(r.size(), ranks) / 2;
    const double scatter = double(ranks - 1) * double(int4_bucket(r, ranks, 0).blocks * kInt4Block);
    bytes += fp8_there ? scatter + gather + ring_allreduce_bytes(sizeof(float), ranks) : 2 * gather;
  }
  return bytes;
}

Int4Block int4_round(const float* x, size_t count, uint64_t key, uint64_t stream, uint64_t first) {
  float max = 0;
  for (size_t i = 0; i < count; ++i) max = std::max(max, int4_magnitude(x[i]));
  Int4Block out{};
  out.scale = int4_scale_bits(max);
  const float inv = int4_inverse(int4_scale(out.scale));
  for (size_t i = 0; i < kInt4Block; ++i) {
    const unsigned code = int4_code(i < count ? x[i] : 0.f, inv, counter_uniform(key, stream, first + i));
    out.q[i / 2] = uint8_t(out.q[i / 2] | (code << (4 * (i % 2))));
  }
  return out;
}

namespace {

// The gradients of block t of the bucket (t counts over every chunk), zeros past its end.
size_t block_values(const Int4Bucket& b, const float* g, size_t t, float* x) {
  const size_t first = b.lo + t * kInt4Block, end = b.lo + b.n;
  const size_t count = first < end ? std::min(kInt4Block, end - first) : 0;
  std::fill(x, x + kInt4Block, 0.f);
  if (count) std::copy(g + first, g + first + count, x);
  return count;
}

}  // namespace

void int4_deal(const Int4Bucket& b, const float* g, uint64_t key, Int4Block* send) {
  float x[kInt4Block];
  for (size_t t = 0; t < size_t(b.ranks) * b.blocks; ++t) {
    if (t / b.blocks == size_t(b.rank)) continue;
    block_values(b, g, t, x);
    send[t] = int4_round(x, kInt4Block, key, int4_stream(b.rank, 0), b.lo + t * kInt4Block);
  }
}

void int4_sum_own(const Int4Bucket& b, const float* g, const Int4Block* recv, uint64_t key, Int4Block* out) {
  float x[kInt4Block];
  for (size_t k = 0; k < b.blocks; ++k) {
    const size_t t = size_t(b.rank) * b.blocks + k;
    block_values(b, g, t, x);
    for (int j = 0; j < b.ranks; ++j) {
      if (j == b.rank) continue;
      for (size_t i = 0; i < kInt4Block; ++i) x[i] += int4_value(recv[size_t(j) * b.blocks + k], i);
    }
    out[k] = int4_round(x, kInt4Block, key, int4_stream(b.rank, 1), b.lo + t * kInt4Block);
  }
}

void int4_round_chunk(const Int4Bucket& b, const float* x, uint64_t key, Int4Block* out) {
  for (size_t k = 0; k < b.blocks; ++k)
    out[k] = int4_round(x + k * kInt4Block, kInt4Block, key, int4_stream(b.rank, 1),
                        b.lo + (size_t(b.rank) * b.blocks + k) * kInt4Block);
}

void int4_widen(const Int4Bucket& b, const Int4Block* all, float* sums) {
  for (size_t i = 0; i < b.n; ++i) sums[b.lo + i] = int4_value(all[i / kInt4Block], i % kInt4Block);
}

}  // namespace convoy
