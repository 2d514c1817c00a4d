// `train bench-loader`: the loader alone, without a net, in the CUDA backend's raw mode and the CPU
// backend's float mode, so that input throughput can be measured apart from the step it feeds.
#pragma once
#include <cstdint>
#include <string>

#include "input/augment_spec.h"
#include "input/epoch_plan.h"

namespace convoy {

struct LoaderBenchOptions {
  std::string data;
  std::string mode = "both";                                     // raw | float | both
  int batch = 256, readers = 0, prefetch = 0, window_files = 4;  // readers 0: every usable core
  int local_ranks = 1;
  int epochs = 3;           // epoch 0 warms the page cache; the median of the rest is reported
  AugmentSpec augment;      // bench-loader flips unless told --no-flip
  bool train = true;        // false: the evaluation pass (file order, centre crop)
  bool mirror = false;      // raw: mirror in the loader (flips all 0), as the Python module does
  int rank = 0, ranks = 1;  // the share of one rank of `ranks`, as train's rank would read it
  bool digest = false;      // a CRC32C of every epoch's batches (slows the consumer)
  double step_us = 0;       // the consumer's own time per batch (a GPU step), spent spinning
  uint64_t seed = 1;
  SampleOrder order = SampleOrder::local;  // how the dataset is dealt to the ranks (epoch_plan.h)
};

// Prints one line per epoch and a summary line per mode; returns the process exit code.
int run_loader_bench(const LoaderBenchOptions& o);

}  // namespace convoy
