// Rank 0's end of a run: rejects.tsv, mean_image.png and then dataset.json, written last so that
// its presence means every batch file it lists is complete; and the run's closing log lines.
#pragma once
#include <string>

#include "datagen/gpu_lanes.h"
#include "datagen/index.h"
#include "datagen/phases.h"
#include "datagen/rank_result.h"
#include "datagen/run_options.h"
#include "datagen/stats.h"
#include "shared/dataset_meta.h"

namespace convoy::datagen {

// What the ranks came to, and what the run's timings record besides.
struct RunEnd {
  const DatasetSums& sums;  // reduced over the ranks
  const RankResult& all;    // gathered from the ranks
  int ranks = 1, threads = 1;
  double scan_seconds = 0;
  const Steps& steps;     // the run's steps so far
  const GpuLanes* lanes;  // rank 0's, for the log; nullptr without --gpu-resize
  int status = 0;         // the run's exit status: 2 when an input is incomplete
};

// rejects.tsv, mean_image.png, dataset.json; returns what dataset.json holds. When no sample was
// kept, dataset.json is not written (the caller says why: nothing_decoded).
DatasetMeta finish_dataset(const RunOptions& opt, const InputIndex& index, const RunEnd& end);
// The one line for a run whose every indexed member was refused while decoding: how many for each
// reason, and the first of each.
std::string nothing_decoded(const InputIndex& index, const RankResult& all);
// The closing lines: what was written, in how long, and where the time went.
void log_run_end(const RunOptions& opt, const InputIndex& index, const DatasetMeta& meta, const RunEnd& end);

}  // namespace convoy::datagen
