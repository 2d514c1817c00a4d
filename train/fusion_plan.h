// Which of a CUDA net's passes run fused with a neighbour's and where each gradient is written:
// decisions over the nodes alone (their ops' OpFusion, their consumers, their channels), made once
// when GpuNet is built and read by it at every pass. Host-only, so that the CPU build compiles and
// tests it. Each rule below is one function of fusion_plan.cpp.
#pragma once
#include <array>
#include <cstddef>
#include <vector>

#include "train/layers/op.h"
#include "train/net_node.h"

namespace convoy {

struct FusionPlan {
  // Per node and input: whether the input's gradient already holds another consumer's part when
  // this node's backward pass comes (it is added to), or this node is the first to give it one (it
  // is written: no zeroing pass, no scratch).
  std::vector<std::array<bool, kMaxInputs>> adds;
  // bf16 nets: an op that can (OpFusion::relu_bf16: batch norm, residual add) runs the ReLU that is
  // its only consumer in the same pass: relu_of[i] is that ReLU's node (-1 for none), and fused[j]
  // marks a ReLU run by its input.
  std::vector<int> relu_of;
  std::vector<bool> fused;
  // bf16 nets: a fused ReLU that is a ReLU6 (OpFusion::relu6_bf16): its input clips at 6 as well,
  // and is never deferred (the consumers that take a deferred ReLU apply max(0, .) only).
  std::vector<bool> clipped;
  // bf16 nets: per node and input, whether its gradient part goes to a shared part buffer instead
  // of being added to the input's dy, for a ReLU run by an op that sums the two parts as it reads
  // them (OpFusion::sums_relu_gradient_parts); split_reader[j] marks that op. The buffer is shared:
  // between a part's writer and its reader no other part is written. part_values: its size per
  // sample (0: no part).
  std::vector<std::array<bool, kMaxInputs>> split;
  std::vector<bool> split_reader;
  size_t part_values = 0;
  // bf16 nets: a node that can (OpFusion::defers_channel_affine: batch norm) leaves its output as
  // scale and shift for an only consumer that takes inputs so (the residual add): deferred[i]
  // marks it, and affine_in[j][k] is the node whose output node j's input k is so (-1: none).
  std::vector<bool> deferred;
  std::vector<std::array<int, kMaxInputs>> affine_in;
  // bf16 nets: an add running its ReLU whose inputs include deferred batch norms without ReLUs
  // (OpFusion::takes_deferred_gradient_sums) writes its input gradient once, into one input's dy,
  // and takes those batch norms' gradient sums: skip_grad[j][k] marks the input gradient node j
  // leaves unwritten, grad_from[m] the node whose dy holds batch norm m's gradient (-1: its own,
  // and only then is its dy stored), and sums_taken[m] a batch norm whose sums are so taken.
  std::vector<std::array<bool, kMaxInputs>> skip_grad;
  std::vector<int> grad_from;
  std::vector<bool> sums_taken;
};

// The plan for a net's nodes (Net::nodes()) stored as bf16 (bf16 true) or fp32, where only the
// order of the gradient sums applies.
FusionPlan plan_fusions(const std::vector<Node>& nodes, bool bf16);

}  // namespace convoy
