// How a training step's gradients travel between ranks: the flat gradient buffer cut into all-reduce
// buckets in the order the backward pass completes it, and the bytes those all-reduces put on the wire.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "train/net_node.h"

namespace convoy {

// Elements [lo, hi) of the flat parameter (and gradient) buffer.
struct FlatRange {
  size_t lo = 0, hi = 0;
  size_t size() const { return hi - lo; }
  bool empty() const { return hi == lo; }
  bool operator==(const FlatRange& o) const { return lo == o.lo && hi == o.hi; }
};

// A node's weights and biases, which its backward pass completes together; empty for a node with none.
FlatRange param_range(const Node& nd);

// The parameter ranges of the nodes in the order the backward pass completes them (the last node's
// first), nodes without parameters left out.
std::vector<FlatRange> backward_ranges(const std::vector<Node>& nodes);

// The all-reduce buckets, in the order they are sent: ranges taken in backward order and merged while
// each adjoins the last from below and the bucket stays within bucket_bytes (elem_bytes an element,
// the precision on the wire; a single range larger than that is a bucket of its own). Once less than
// twice bucket_bytes is left to come, a bucket also closes at half of what is left, but not below a
// sixteenth of bucket_bytes: the gradients the backward pass completes last (the first layers': few
// bytes, long passes) so go in ever smaller buckets, and the last all-reduce, which nothing hides,
// is short.
std::vector<FlatRange> plan_buckets(const std::vector<FlatRange>& ranges, size_t elem_bytes, size_t bucket_bytes);

// Bytes one rank sends in an all-reduce of `bytes` over `ranks` with NCCL's ring algorithm, a
// reduce-scatter then an all-gather, each sending (ranks - 1) / ranks of the buffer: 2 (ranks - 1) /
// ranks x bytes; 0 for one rank.
double ring_allreduce_bytes(double bytes, int ranks);

// A training step's bytes on the wire, per rank: each bucket's all-reduce at elem_bytes an element
// (after the all-reduce of its scale_bytes, where it has a scale), and the all-reduce of the 4-byte
// verdict on the step's loss.
double step_wire_bytes(const std::vector<FlatRange>& buckets, double elem_bytes, int ranks, size_t scale_bytes = 0);

}  // namespace convoy
