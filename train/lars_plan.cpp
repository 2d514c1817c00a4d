// The LARS plan (lars_plan.h): tensors cut into chunks, and the tensors of an update span found by
// binary search over their offsets. Host-only, shared by both backends and their tests.
#include "train/lars_plan.h"

#include <algorithm>
#include <limits>
#include <string>

#include "shared/error.h"

namespace convoy {

LarsPlan plan_lars(const std::vector<LarsTensor>& tensors, size_t chunk) {
  if (chunk == 0) fail("plan_lars: chunks of no elements");
  LarsPlan p;
  uint64_t at = 0;
  for (const LarsTensor& in : tensors) {
    if (in.count == 0) continue;
    if (in.off != at) fail("plan_lars: the tensors do not lie one after the other from element 0");
    LarsTensor t = in;
    t.first_chunk = uint32_t(p.chunks.size());
    for (uint64_t lo = t.off; lo < t.off + t.count; lo += chunk)
      p.chunks.push_back({lo, std::min<uint64_t>(lo + chunk, t.off + t.count), uint32_t(p.tensors.size())});
    t.chunks = uint32_t(p.chunks.size() - t.first_chunk);
    p.tensors.push_back(t);
    at += t.count;
    // Chunk and tensor indices are 32-bit on the device.
    if (p.chunks.size() > std::numeric_limits<uint32_t>::max())
      fail("plan_lars: more than 2^32 chunks of " + std::to_string(chunk) + " elements");
  }
  return p;
}

LarsSlice LarsPlan::slice(size_t lo, size_t hi) const {
  // The first tensor starting at or after x; x must be a tensor's start or the end of the buffer.
  auto tensor_at = [&](size_t x) {
    const auto it = std::lower_bound(tensors.begin(), tensors.end(), x,
                                     [](const LarsTensor& t, size_t v) { return t.off < v; });
    if (it == tensors.end() ? x != params() : it->off != x)
      fail("LARS: the update span [" + std::to_string(lo) + ", " + std::to_string(hi) +
           ") does not begin and end where parameter tensors do");
    return size_t(it - tensors.begin());
  };
  if (hi < lo || hi > params()) fail("LARS: an update span beyond the parameters");
  LarsSlice s;
  s.t0 = tensor_at(lo);
  s.t1 = tensor_at(hi);
  s.c0 = s.t0 < tensors.size() ? tensors[s.t0].first_chunk : chunks.size();
  s.c1 = s.t1 < tensors.size() ? tensors[s.t1].first_chunk : chunks.size();
  return s;
}

}  // namespace convoy
