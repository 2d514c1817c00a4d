// The fusion plan's rules, in the order they build on one another: the order of the gradient
// sums, the ReLUs that batch norms and adds run, the gradient parts kept apart, the batch norms
// that leave their output to their consumer, and the adds that take those batch norms' gradient sums.
#include "train/fusion_plan.h"

#include <algorithm>

#include "train/layers/op.h"

namespace convoy {
namespace {

using Nodes = std::vector<Node>;

OpFusion fusion(const Node& nd) { return nd.op().fusion(nd); }

// Backward passes run in reverse node order, each input in turn: the first to reach a node with
// several consumers writes its gradient, the later ones add to it.
void order_gradient_sums(const Nodes& nodes, FusionPlan& p) {
  p.adds.assign(nodes.size(), {});
  std::vector<bool> reached(nodes.size(), false);
  for (int idx = int(nodes.size()) - 1; idx >= 0; --idx)
    for (size_t k = 0; k < nodes[idx].in.size(); ++k) {
      const int from = nodes[idx].in[k];
      if (from < 0) continue;
      p.adds[idx][k] = reached[from];
      reached[from] = true;
    }
}

// bf16: an op that can (batch norm, residual add) runs the ReLU that is its only consumer in the
// same pass; the ReLU node then does nothing. Likewise a ReLU6, run by batch norm where the
// output's channels fill 16-byte packs of bf16 (8), so that the clip's bits are kept.
void fuse_relus(const Nodes& nodes, bool bf16, FusionPlan& p) {
  p.relu_of.assign(nodes.size(), -1);
  p.fused.assign(nodes.size(), false);
  p.clipped.assign(nodes.size(), false);
  if (!bf16) return;
  for (size_t j = 0; j < nodes.size(); ++j) {
    const int i = nodes[j].in[0];
    const bool relu6 = nodes[j].op().is_relu6();
    if (!(nodes[j].op().is_relu() || relu6) || i < 0 || nodes[i].consumers != 1) continue;
    const OpFusion f = fusion(nodes[i]);
    if (relu6 ? !f.relu6_bf16 || nodes[i].out.c % 8 != 0 : !f.relu_bf16) continue;
    p.relu_of[i] = int(j);
    p.fused[j] = true;
    p.clipped[j] = relu6;
  }
}

// bf16: see FusionPlan::split. Only a ReLU with two consumers, run by an op that sums its
// gradient's parts, whose second consumer in backward order would add inside its own pass (a
// convolution); and only where the part written last has been read (in a ResNet, each block's
// first convolution writes the part the previous block's add reads next).
void split_gradient_sums(const Nodes& nodes, FusionPlan& p) {
  p.split.assign(nodes.size(), {});
  p.split_reader.assign(nodes.size(), false);
  p.part_values = 0;
  int unread = int(nodes.size());  // the reader of the last part written, by backward order
  for (int idx = int(nodes.size()) - 1; idx >= 0; --idx)
    for (size_t k = 0; k < nodes[idx].in.size(); ++k) {
      const int from = nodes[idx].in[k];
      if (from < 0 || !p.adds[idx][k] || !p.fused[from] || nodes[from].consumers != 2 || idx >= unread) continue;
      const int reader = nodes[from].in[0];
      if (!fusion(nodes[idx]).adds_to_dx || !fusion(nodes[reader]).sums_relu_gradient_parts) continue;
      p.split[idx][k] = true;
      p.adds[idx][k] = false;
      p.split_reader[reader] = true;
      unread = reader;
      p.part_values = std::max(p.part_values, nodes[from].out.size());
    }
}

// bf16: see FusionPlan::deferred. A batch norm with no ReLU of its own can leave its output so to a
// consumer that takes it (the residual add); one with its fused ReLU, to a consumer that takes it
// with the ReLU (max pooling), and the ReLU node's output is then not stored either. Its output is
// bf16, as its only consumer is not the loss.
void defer_affines(const Nodes& nodes, bool bf16, FusionPlan& p) {
  p.deferred.assign(nodes.size(), false);
  std::array<int, kMaxInputs> none;  // {-1, -1} would leave the inputs past the second at 0
  none.fill(-1);
  p.affine_in.assign(nodes.size(), none);
  if (!bf16) return;
  for (size_t j = 0; j < nodes.size(); ++j) {
    const OpFusion f = fusion(nodes[j]);
    for (size_t k = 0; k < nodes[j].in.size(); ++k) {
      const int i = nodes[j].in[k];
      if (i < 0 || nodes[i].consumers != 1 || p.clipped[i]) continue;
      // The node that would leave its output: i itself, or the batch norm whose fused ReLU i is.
      const int m = p.fused[i] ? nodes[i].in[0] : i;
      const bool takes = p.fused[i] ? f.takes_channel_affine_relu : p.relu_of[i] < 0 && f.takes_channel_affine;
      if (!takes || m < 0 || !fusion(nodes[m]).defers_channel_affine) continue;
      p.deferred[m] = p.deferred[i] = true;
      p.affine_in[j][k] = m;
    }
  }
}

// Whether node b's dy, written by node j's backward pass, is left as it is until node m's backward
// pass has read it: no other consumer of b whose backward pass comes between (a later node) writes
// into it (one whose part goes apart, FusionPlan::split, does not).
bool gradient_kept_until(const Nodes& nodes, const FusionPlan& p, int b, int j, int m) {
  for (int q = m + 1; q < int(nodes.size()); ++q)
    for (size_t k = 0; k < nodes[q].in.size(); ++k)
      if (q != j && nodes[q].in[k] == b && !p.split[q][k]) return false;
  return true;
}

// bf16: see FusionPlan::skip_grad. The add must write both input gradients whole (neither is added
// to nor split), and the input whose dy keeps the gradient (the one that is not such a batch norm,
// else the second) must not be written by another node before each such batch norm has read it.
void take_deferred_gradient_sums(const Nodes& nodes, bool bf16, FusionPlan& p) {
  p.skip_grad.assign(nodes.size(), {});
  p.grad_from.assign(nodes.size(), -1);
  p.sums_taken.assign(nodes.size(), false);
  if (!bf16) return;
  for (size_t j = 0; j < nodes.size(); ++j) {
    const Node& nd = nodes[j];
    if (!fusion(nd).takes_deferred_gradient_sums || p.relu_of[j] < 0 || nd.in.size() != 2 ||
        nd.out.c % kBf16ChannelPack != 0 || p.adds[j][0] || p.adds[j][1] || p.split[j][0] || p.split[j][1])
      continue;
    std::array<int, 2> bn{};
    for (int k = 0; k < 2; ++k)
      bn[k] = p.affine_in[j][k] >= 0 && p.relu_of[p.affine_in[j][k]] < 0 ? p.affine_in[j][k] : -1;
    if (bn[0] < 0 && bn[1] < 0) continue;
    const int keep = bn[0] >= 0 ? 1 : 0, other = 1 - keep, b = nd.in[keep];  // bn[other] >= 0
    if (b < 0 || !gradient_kept_until(nodes, p, b, int(j), bn[other])) continue;
    p.skip_grad[j][other] = true;
    p.grad_from[bn[other]] = b;
    for (int m : bn)
      if (m >= 0) p.sums_taken[m] = true;
  }
}

}  // namespace

FusionPlan plan_fusions(const std::vector<Node>& nodes, bool bf16) {
  FusionPlan p;
  order_gradient_sums(nodes, p);
  fuse_relus(nodes, bf16, p);
  split_gradient_sums(nodes, p);
  defer_affines(nodes, bf16, p);
  take_deferred_gradient_sums(nodes, bf16, p);
  return p;
}

}  // namespace convoy
