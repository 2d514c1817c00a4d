// The batch-size sweep of `train --batch auto` and `train tune-batch`: the training step timed at
// each power-of-two batch per rank that fits (the GPU's memory, or a bound on the CPU's), on every
// rank at once, and the fastest chosen; every rank ends with the same choice.
#pragma once
#include <memory>
#include <string>

#include "input/loader.h"
#include "train/batch_choice.h"
#include "train/net.h"
#include "train/optimizer.h"
#include "train/run_spec.h"
#include "train/step.h"
#include "train/train_options.h"

namespace convoy {

// What the sweep runs on, made before it without any collective call (so that every rank can agree
// on a refusal): the data's own samples held in memory (the loader's batch of up to 256, augmented as
// in training), the net and optimiser the steps start from, and the largest size to try.
struct SweepInputs {
  Backend backend = Backend::cpu;
  HostBatch pool;
  SampleFormat format;
  long long per_rank = 0;  // the samples every rank is dealt in an epoch
  std::unique_ptr<Net> net;
  std::unique_ptr<Optimizer> opt;
  int accumulate = 1;    // [train] accumulate: the sizes tried are a rank's micro-batch
  int largest = 0;       // a power of two: the largest size tried
  std::string limit;     // what set it
  double cpu_bound = 0;  // CPU: the bytes the estimate of a size's memory must stay within
};

// Refuses, in one line, data with too few samples for a batch of 1 per rank, and on the CPU a net
// of which one image exceeds the memory bound.
SweepInputs sweep_inputs(const TrainOptions& o, const RunSpec& spec, int rank, int ranks);

// Times the run's own step (the gradients' all-reduce included on several ranks) at 1, 2, 4, ...
// per rank up to in.largest, or to the first size that runs out of memory, which ends the sweep and
// is never chosen. Batches are the pool's samples repeated, so that the loader's pace does not enter
// the figures. Every rank returns its own table and rank 0's choice; per_rank 0: not even 1 fitted.
BatchSweep sweep_batches(const TrainOptions& o, SweepInputs& in, int rank, int ranks);

}  // namespace convoy
