// A training step's figures summed on the device (loss, top-1 hits, samples) and its loss checked
// for NaN or infinity there, so the host reads them only at log lines and checkpoints.
#pragma once
#include "train/cuda/step_scalars.h"

namespace convoy::gpu {

class Context;

// Adds the batch's loss sum, top-1 hits and sample count to acc[0..2] and stores its mean loss in
// acc[3], in a fixed order (one block), so the figures do not depend on scheduling. Top-1 counts
// as the trainer's count_correct does: no class above the label's probability, ties to the lower index.
// A batch whose loss sum is NaN or infinite adds nothing to acc[0..2]. With `step`, its mean loss
// and whether that is finite go to step->loss and step->nonfinite (see StepScalars).
void batch_metrics(Context& ctx, int n, int classes, const float* probs, const int* labels, const float* losses,
                   double* acc, StepScalars* step = nullptr);

}  // namespace convoy::gpu
