// Which samples a rank reads in an epoch, and in what order: a function of (seed, epoch, rank,
// ranks, local batch, order) alone, so that a resumed run can start mid-epoch and every rank knows
// every other rank's share without talking to it. In training the permuted files are laid out as
// one sequence of samples; with G = ranks x local batch the epoch has floor(samples / G) steps. In
// local order rank r takes the contiguous range [r x steps x local, (r + 1) x steps x local) of it
// (the files it overlaps: about files / ranks, and at most two of them in part), shuffled in
// windows of `window_files` of those files (the shuffle buffer). In global order the sequence's
// first steps x G samples are shuffled in windows of `window_files` files (one rank's local order at
// the local batch G), global batch b is its samples [b x G, (b + 1) x G) and rank r takes slice r of
// each: the global batches are the same at any number of ranks, but every rank reads every file.
// Either way fewer than G samples are left out. In evaluation files are dealt whole to ranks by
// stride, in file order, every sample once. With [train] accumulate the trainer's step cuts each
// local batch into consecutive micro-batches: the plan, and so every sample's step and order, is the
// same.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shared/dataset_meta.h"

namespace convoy {

struct SampleRef {
  uint32_t file = 0;   // index into DatasetMeta::files
  uint32_t index = 0;  // sample within the file
};

// How training's samples are dealt to ranks (above): local keeps each rank to its own files, global
// keeps the global batches independent of the number of ranks.
enum class SampleOrder { local, global };
const char* order_name(SampleOrder o);                            // "local" | "global"
std::optional<SampleOrder> parse_order(const std::string& name);  // nullopt for any other name

struct PlanOptions {
  uint64_t seed = 0;
  int epoch = 0;
  int rank = 0, ranks = 1;
  bool shuffle = true;  // training; else evaluation
  int window_files = 4;
  int local_batch = 1;  // training: samples per rank and step
  // Training, a run resumed on other ranks mid-epoch: the ranks whose plan the epoch follows. Its
  // global batch b is the union over those ranks q of their plan's batch b (q's samples
  // [b x L_q, (b + 1) x L_q), in rank order), and rank r of this run takes its local batch's slice
  // of it, so the global batches are the ones the checkpoint's run would have trained. 0: ranks.
  int plan_ranks = 0;
  // Training: how samples are dealt (above). Global order ignores plan_ranks: its global batches
  // are already the same for any ranks.
  SampleOrder order = SampleOrder::local;
};

// Training steps an epoch at `ranks` x `local_batch` samples a step: the same on every rank, and
// for any ranks with the same global batch, so the lr schedule's length is known up front.
long long steps_per_epoch(const DatasetMeta& meta, int ranks, int local_batch);
// The files a rank reads in an epoch, in the order it first needs them.
std::vector<uint32_t> rank_files(const DatasetMeta& meta, const PlanOptions& o);
// The rank's samples in order: in training its steps_per_epoch() x local_batch samples, in
// evaluation every sample of its files.
std::vector<SampleRef> rank_stream(const DatasetMeta& meta, const PlanOptions& o);

}  // namespace convoy
