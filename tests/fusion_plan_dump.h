// A fusion plan as text, one line per node, for the plan's test to hold against the pinned plans in
// tests/data/fusion_plan/ (written from GpuNet's own planning before it moved to train/fusion_plan).
#pragma once
#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "train/net.h"

namespace convoy::test {

struct PlanVectors {
  const std::vector<int>& relu_of;
  const std::vector<bool>& fused;
  const std::vector<bool>& deferred;
  const std::vector<std::array<int, 2>>& affine_in;
  const std::vector<std::array<bool, 2>>& skip_grad;
  const std::vector<int>& grad_from;
  const std::vector<bool>& sums_taken;
  const std::vector<std::array<bool, 2>>& adds;
  const std::vector<std::array<bool, 2>>& split;
  const std::vector<bool>& split_reader;
  size_t part_bytes;  // the shared gradient part's bytes for a batch of 32
};

inline std::string plan_text(const Net& net, const PlanVectors& p) {
  const auto& nodes = net.nodes();
  auto name = [&](int i) { return i < 0 ? std::string("-") : nodes[size_t(i)].spec.name; };
  auto pair = [](const std::array<bool, 2>& v) { return std::to_string(int(v[0])) + std::to_string(int(v[1])); };
  std::string t = "part_bytes " + std::to_string(p.part_bytes) + "\n";
  for (size_t i = 0; i < nodes.size(); ++i) {
    t += nodes[i].spec.name + ":";
    if (p.relu_of[i] >= 0) t += " relu_of=" + name(p.relu_of[i]);
    if (p.fused[i]) t += " fused";
    if (p.deferred[i]) t += " deferred";
    if (p.affine_in[i][0] >= 0 || p.affine_in[i][1] >= 0)
      t += " affine_in=" + name(p.affine_in[i][0]) + "," + name(p.affine_in[i][1]);
    if (p.skip_grad[i][0] || p.skip_grad[i][1]) t += " skip_grad=" + pair(p.skip_grad[i]);
    if (p.grad_from[i] >= 0) t += " grad_from=" + name(p.grad_from[i]);
    if (p.sums_taken[i]) t += " sums_taken";
    if (p.adds[i][0] || p.adds[i][1]) t += " adds=" + pair(p.adds[i]);
    if (p.split[i][0] || p.split[i][1]) t += " split=" + pair(p.split[i]);
    if (p.split_reader[i]) t += " split_reader";
    t += "\n";
  }
  return t;
}

}  // namespace convoy::test
