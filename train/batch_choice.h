// What `train --batch auto` and `train tune-batch` decide from a sweep's measurements: the fastest
// batch (ties to the smaller), seed 002's HPL-derived size beside it, the learning rate scaled to the
// chosen batch, and the table that shows them.
#pragma once
#include <string>
#include <vector>

#include "train/net_config.h"
#include "train/net_node.h"

namespace convoy {

// One batch size of the sweep, per rank: the images/s of its best timed round, the memory it held
// (the GPU's as allocated; on the CPU, the estimate the sweep was bounded by), or why it did not fit.
struct BatchTrial {
  int batch = 0;
  double images_per_s = 0;
  double memory_bytes = 0;
  bool memory_estimated = false;
  std::string no_fit;  // "": it fitted
  bool fits() const { return no_fit.empty(); }
};

// Within this fraction of the fastest, the smaller batch wins (less memory, more steps per epoch).
constexpr double kTieFraction = 0.01;

// The batch of the fastest fitting trial, or of a smaller one within kTieFraction of it; 0 when
// none fitted.
int fastest_batch(const std::vector<BatchTrial>& trials);

// Seed 002's size: 2^nint(log2(tile / image)), with its HPL tile of NB = 160 doubles squared,
// 160 * 160 * 64 bits, and the image as fp32 values (its MNIST image: 28 * 28 * 32 = 25,088 bits,
// which gives 2^6 = 64). At least one image.
struct HplBatch {
  double tile_bits = 0, image_bits = 0;
  int exponent = 0;
  int batch = 1;
};
HplBatch hpl_batch(const Dims& input);

// The learning rate for the chosen global batch: the config's lr x global batch / config batch
// (linear scaling; a schedule's other rates, derived from lr, follow it).
double scaled_lr(double config_lr, int config_batch, int global_batch);

// What the sweep found and chose, for the table.
struct BatchSweep {
  std::vector<BatchTrial> trials;
  int per_rank = 0, ranks = 1;
  int accumulate = 1;  // [train] accumulate: per_rank is a micro-batch, this many of which make a rank's batch
  std::string method;  // how each size was timed, and on which samples
  std::string limit;   // what bounded the largest size tried
  HplBatch hpl;
};

// The table (batch, images/s, memory) and the choice beside seed 002's size, one line each.
std::vector<std::string> sweep_report(const BatchSweep& s);

}  // namespace convoy
