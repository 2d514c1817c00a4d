// The training run and the stand-alone evaluation, as the command line starts them: the set-up
// every run shares (threads, the config, the checks of its inputs), then TrainRun's epochs or one
// evaluation pass.
#pragma once
#include "shared/error.h"
#include "train/evaluation.h"
#include "train/train_options.h"

namespace convoy {

// A run's inputs refused before any rank began a collective step: every rank throws it, and only
// the lowest refusing rank's carries the message (the others' what() is empty), so that a job of
// many ranks says it once and ends without the abort a failure mid-run needs.
struct SetupRefused : Error {
  using Error::Error;
};

// Returns the process exit code.
int run_training(const TrainOptions& o, int rank, int ranks);
// `train tune-batch`: the sweep of --batch auto (batch_tuner.h), its table and choice on stdout.
int run_tune_batch(const TrainOptions& o, int rank, int ranks);
int run_eval(const EvalOptions& o, int rank, int ranks);

}  // namespace convoy
