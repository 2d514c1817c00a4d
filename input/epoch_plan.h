// Which samples a rank reads in an epoch, and in what order: a function of (seed, epoch, rank,
// ranks) alone, so that a resumed run can start mid-epoch and every rank knows every other
// rank's share without talking to it. Files are permuted per epoch, dealt to ranks by stride,
// and shuffled in windows of `window_files` consecutive files (the shuffle buffer).
#pragma once
#include <cstdint>
#include <vector>

#include "shared/dataset_meta.h"

namespace convoy {

struct SampleRef {
  uint32_t file = 0;   // index into DatasetMeta::files
  uint32_t index = 0;  // sample within the file
};

struct PlanOptions {
  uint64_t seed = 0;
  int epoch = 0;
  int rank = 0, ranks = 1;
  bool shuffle = true;
  int window_files = 4;
  int local_batch = 1;  // training: samples per rank and step
  int plan_ranks = 0;   // training: the ranks whose plan the epoch follows (0: ranks)
};

std::vector<uint32_t> rank_files(const DatasetMeta& meta, const PlanOptions& o);
std::vector<SampleRef> rank_stream(const DatasetMeta& meta, const PlanOptions& o);
// The samples every one of `ranks` ranks is sure to be dealt in any epoch: floor(files / ranks) of
// the smallest files.
long long samples_every_rank_gets(const DatasetMeta& meta, int ranks);
// Full batches every rank can fill in every epoch: the same number on every rank, so no rank
// waits in an all-reduce that another never reaches.
long long steps_per_epoch(const DatasetMeta& meta, PlanOptions o, int local_batch);
long long steps_per_epoch(const DatasetMeta& meta, int ranks, int local_batch);

}  // namespace convoy
