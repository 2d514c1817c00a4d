// A fusion plan as text, one line per node, for the plan's test to hold against the pinned plans in
// tests/data/fusion_plan/ (written from GpuNet's own planning before it moved to train/fusion_plan).
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "train/layers/op.h"
#include "train/net.h"

namespace convoy::test {

struct PlanVectors {
  const std::vector<int>& relu_of;
  const std::vector<bool>& fused;
  const std::vector<bool>& clipped;
  const std::vector<bool>& deferred;
  const std::vector<std::array<int, kMaxInputs>>& affine_in;
  const std::vector<std::array<bool, kMaxInputs>>& skip_grad;
  const std::vector<int>& grad_from;
  const std::vector<bool>& sums_taken;
  const std::vector<std::array<bool, kMaxInputs>>& adds;
  const std::vector<std::array<bool, kMaxInputs>>& split;
  const std::vector<bool>& split_reader;
  size_t part_bytes;  // the shared gradient part's bytes for a batch of 32
};

// Per input, at least two columns (the pinned plans were first written for two inputs at most).
inline std::string plan_text(const Net& net, const PlanVectors& p) {
  const auto& nodes = net.nodes();
  auto name = [&](int i) { return i < 0 ? std::string("-") : nodes[size_t(i)].spec.name; };
  std::string t = "part_bytes " + std::to_string(p.part_bytes) + "\n";
  for (size_t i = 0; i < nodes.size(); ++i) {
    const size_t n = std::max<size_t>(2, nodes[i].in.size());
    auto bits = [&](const std::array<bool, kMaxInputs>& v) {
      std::string b, any;
      for (size_t k = 0; k < n; ++k) b += v[k] ? "1" : "0";
      return b.find('1') == std::string::npos ? any : b;
    };
    std::string affine;
    for (size_t k = 0; k < n; ++k) affine += (k ? "," : "") + name(p.affine_in[i][k]);
    t += nodes[i].spec.name + ":";
    if (p.relu_of[i] >= 0) t += " relu_of=" + name(p.relu_of[i]);
    if (p.fused[i]) t += " fused";
    if (p.clipped[i]) t += " clipped";
    if (p.deferred[i]) t += " deferred";
    if (affine.find_first_not_of("-,") != std::string::npos) t += " affine_in=" + affine;
    if (!bits(p.skip_grad[i]).empty()) t += " skip_grad=" + bits(p.skip_grad[i]);
    if (p.grad_from[i] >= 0) t += " grad_from=" + name(p.grad_from[i]);
    if (p.sums_taken[i]) t += " sums_taken";
    if (!bits(p.adds[i]).empty()) t += " adds=" + bits(p.adds[i]);
    if (!bits(p.split[i]).empty()) t += " split=" + bits(p.split[i]);
    if (p.split_reader[i]) t += " split_reader";
    t += "\n";
  }
  return t;
}

}  // namespace convoy::test
