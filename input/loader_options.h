// What a loader is asked for: the dataset folder, the batch, the pass, what the consumer takes,
// the augmentation, this rank's share and the threads. Every loader (train's, an evaluation's, the
// Python module's, bench-loader's) is given them through loader_options(), so that none is left
// with another's default.
#pragma once
#include <cstdint>
#include <string>

#include "input/augment_spec.h"
#include "input/epoch_plan.h"

namespace convoy {

// What the consumer takes from a batch: normalised float samples (the CPU backend: HostBatch::x);
// the uint8 samples and whether each is to be mirrored, to mirror and normalise itself (the CUDA
// backend: HostBatch::pixels and flips); or the uint8 samples mirrored here, flips all 0 (a consumer
// that takes pixels only: the Python module).
enum class SampleOutput { floats, raw, mirrored };

// Which samples a rank reads, and in what order (epoch_plan.h): its place among the ranks, the
// seed, the shuffle window in batch files, and how training's samples are dealt to ranks.
struct DataShare {
  int rank = 0, ranks = 1;
  uint64_t seed = 0;
  int window_files = 4;
  SampleOrder order = SampleOrder::local;
};

struct LoaderOptions {
  std::string dir;
  int local_batch = 128;
  bool train = true;  // shuffle and augment; else file order, centre crop, partial last batch
  SampleOutput output = SampleOutput::floats;
  AugmentSpec augment;
  DataShare share;
  int readers = 2;   // reader threads (loader_sizing.h chooses the default)
  int prefetch = 0;  // batches kept ready; 0: about 64 MiB of them (4 to 64)

  bool raw() const { return output != SampleOutput::floats; }
};

// The one way LoaderOptions are made. The loader checks them when it is made (Loader's constructor).
LoaderOptions loader_options(const std::string& dir, int local_batch, bool train, SampleOutput output,
                             const AugmentSpec& augment, const DataShare& share, int readers, int prefetch);

}  // namespace convoy
