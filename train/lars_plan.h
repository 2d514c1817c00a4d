// LARS's view of the flat parameter buffer: its tensors (each layer's weights, each layer's biases),
// which of them take the trust ratio, and each cut into chunks of a fixed size, so that both
// backends sum a tensor's norms in parallel yet always in the same order (a resumed run repeats).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace convoy {

// Elements [off, off + count) of the flat buffer. adapt: its rate is the trust ratio times the
// learning rate and it takes weight decay; else it moves by momentum SGD at the learning rate and
// without decay (MLPerf's skip list). Its chunks are [first_chunk, first_chunk + chunks) of the plan's.
struct LarsTensor {
  uint64_t off = 0, count = 0;
  uint32_t first_chunk = 0, chunks = 0;
  uint32_t adapt = 0;
};

// Elements [lo, hi) of tensor `tensor`.
struct LarsChunk {
  uint64_t lo = 0, hi = 0;
  uint32_t tensor = 0;
};

// The tensors [t0, t1) of an update span and their chunks [c0, c1).
struct LarsSlice {
  size_t t0 = 0, t1 = 0, c0 = 0, c1 = 0;
};

// Elements a chunk holds at most: one CUDA block's share of a norm, and one OpenMP task's.
constexpr size_t kLarsChunk = 16384;

struct LarsPlan {
  std::vector<LarsTensor> tensors;
  std::vector<LarsChunk> chunks;

  bool empty() const { return tensors.empty(); }
  size_t params() const { return tensors.empty() ? 0 : size_t(tensors.back().off + tensors.back().count); }
  // The tensors of the span [lo, hi), which must begin and end where tensors do: a tensor's norms
  // need all of it (an all-reduce bucket holds whole layers, bucket_plan.h). Fails otherwise.
  LarsSlice slice(size_t lo, size_t hi) const;
};

// The plan of `tensors` (off, count and adapt set), which must lie one after the other from
// element 0 in the order given; tensors of no elements are left out.
LarsPlan plan_lars(const std::vector<LarsTensor>& tensors, size_t chunk = kLarsChunk);

}  // namespace convoy
