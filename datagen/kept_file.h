// Resume: a batch file an earlier run of the same identity left in the output folder is kept,
// not made again, when its checksums verify, it is the file the plan asks for, and every planned
// sample missing from it is still rejected today.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "datagen/index.h"
#include "datagen/run_options.h"
#include "datagen/sample_maker.h"
#include "shared/batch_file.h"

namespace convoy::datagen {

struct KeptFile {
  Batch batch;                                            // read and verified
  std::vector<std::pair<uint64_t, std::string>> missing;  // planned samples not in it, and why
};

class FileKeeper {
 public:
  FileKeeper(const RunOptions& opt, const InputIndex& index, const SampleMaker& samples)
      : opt_(opt), index_(index), samples_(samples) {}

  // Batch file b, planned to hold `ids`, as the folder holds it, when it can be kept; nothing
  // when there is none, or (with a log line saying why) when it must be made again.
  std::optional<KeptFile> check(uint64_t b, const std::vector<uint64_t>& ids) const;

 private:
  const RunOptions& opt_;
  const InputIndex& index_;
  const SampleMaker& samples_;
};

}  // namespace convoy::datagen
