// Evaluation over a whole dataset: what it asks of a backend (a forward pass in evaluation
// mode), the top-1/top-5 count that training shares, and the loss and accuracies over all ranks.
#pragma once
#include <cstdint>

#include "train/loader.h"

namespace convoy {

// A backend's forward pass in evaluation mode: after evaluate(b), losses() and probs() hold the
// batch's per-sample losses and its [n, classes] probabilities.
class Forward {
 public:
  virtual ~Forward() = default;
  virtual void evaluate(const HostBatch& b) = 0;
  virtual const float* losses() const = 0;
  virtual const float* probs() const = 0;
};

struct EvalResult {
  double loss = 0, top1 = 0, top5 = 0;
  long long samples = 0;
};

// Adds the correct top-1 and top-5 predictions among n rows of probabilities to top1 and top5.
void count_correct(int n, int classes, const float* probs, const int32_t* labels, double& top1, double& top5);

// One pass over the loader's evaluation order (epoch 0); the figures are over every rank's share.
EvalResult evaluate(Forward& forward, Loader& loader, int classes);

}  // namespace convoy
