// The training run and the stand-alone evaluation, as the command line starts them: the set-up
// every run shares (threads, the config), then TrainRun's epochs or one evaluation pass.
#pragma once
#include "train/evaluation.h"
#include "train/train_options.h"

namespace convoy {

// Returns the process exit code.
int run_training(const TrainOptions& o, int rank, int ranks);
int run_eval(const EvalOptions& o, int rank, int ranks);

}  // namespace convoy
