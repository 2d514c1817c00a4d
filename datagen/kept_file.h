// Resume: a batch file an earlier run of the same identity left in the output folder is kept,
// not made again, when its checksums verify, it is the file the plan asks for, and every planned
// sample missing from it is still rejected today; with the statistics of its samples.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "datagen/index.h"
#include "datagen/phases.h"
#include "datagen/run_options.h"
#include "datagen/sample_maker.h"
#include "datagen/stats.h"
#include "shared/batch_file.h"

namespace convoy::datagen {

struct KeptFile {
  Batch batch;                                            // read and verified
  std::vector<std::pair<uint64_t, std::string>> missing;  // planned samples not in it, and why
  DatasetSums sums;                                       // of its samples, as a run making it counts them
};

class FileKeeper {
 public:
  FileKeeper(const RunOptions& opt, const InputIndex& index, const SampleMaker& samples)
      : opt_(opt), index_(index), samples_(samples) {}

  // Batch file b, planned to hold `ids`, as the folder holds it, when it can be kept; nothing
  // when there is none, or (with a log line saying why) when it must be made again. t: the
  // calling thread's phases, for the samples of a JPEG file made again for their statistics.
  std::optional<KeptFile> check(uint64_t b, const std::vector<uint64_t>& ids, Phases& t) const;

 private:
  // kept.sums from its samples' resized pixels; returns "" or why the file must be made again.
  std::string sum_samples(KeptFile& kept, Phases& t) const;

  const RunOptions& opt_;
  const InputIndex& index_;
  const SampleMaker& samples_;
};

}  // namespace convoy::datagen
