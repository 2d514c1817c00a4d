// One layer of a built net as Net and GpuNet hold it, and as its op sees it: the spec, the inputs
// and their dims, the output dims, its place in the flat parameter buffers and its CPU buffers.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "train/net_config.h"

namespace convoy {

// Per-sample tensor dimensions (channels, height, width); fc outputs are {units, 1, 1}.
struct Dims {
  int c = 0, h = 1, w = 1;
  size_t size() const { return size_t(c) * h * w; }
  bool operator==(const Dims& o) const { return c == o.c && h == o.h && w == o.w; }
};

struct Node {
  LayerSpec spec;
  std::vector<int> in;        // node indices; -1 = the net's input
  std::vector<Dims> in_dims;  // the inputs' dims, in the same order
  Dims out;
  int consumers = 0;
  bool fused_relu = false;  // applies the next layer's ReLU itself (a conv on the CPU)
  int alias = -1;           // relu fused into node `alias`: shares its output and gradient
  size_t w_off = 0, w_count = 0, b_off = 0, b_count = 0;  // into weights/grads
  size_t s_off = 0, s_count = 0;                          // into state (running statistics)
  double flops = 0;                                       // forward, per image
  double t_fwd = 0, t_bwd = 0;                            // seconds, when profiling
  std::vector<float> y, dy;
  std::vector<float> aux;        // what the op keeps for backward: dropout mask, batch-norm mean and 1/std
  std::vector<int32_t> aux_i32;  // likewise, as integers: max pool's argmax

  const Op& op() const { return *spec.op; }
};

}  // namespace convoy
