// Evaluation over a whole dataset: what it asks of a backend (a forward pass in evaluation
// mode), the top-1/top-5 count that training shares, the loss and accuracies over all ranks, and
// the test-time flip.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "input/loader.h"
#include "train/data_identity.h"

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

// Refuses a dataset (`meta`, read from `dir`) that a net trained on `trained_on` cannot be evaluated
// on, naming its dataset.json: another image shape, or other class names (the same in another
// order would be scored against the wrong outputs).
void check_evaluable(const DatasetMeta& meta, const std::string& dir, const DataIdentity& trained_on);
// The one way an evaluation set (the folder lo.dir) is opened, by --val and by `train eval`: checked
// as above, read in file order with the centred crop (lo, an evaluation pass: lo.train false), and
// normalised with the training data's mean and std, as the net was trained.
std::unique_ptr<Loader> make_eval_loader(const LoaderOptions& lo, const DataIdentity& trained_on);

// Adds the correct top-1 and top-5 predictions among n rows of probabilities to top1 and top5.
void count_correct(int n, int classes, const float* probs, const int32_t* labels, double& top1, double& top5);

// One pass over the loader's evaluation order (epoch 0); the figures are over every rank's share.
// flip ([train] eval_flip): each image is scored by the mean of its and its mirror image's softmax
// outputs, and its loss is the mean of the two losses.
EvalResult evaluate(Forward& forward, Loader& loader, int classes, bool flip = false);

// With eval_flip, one batch: the means of b's and of its mirror images' softmax outputs ([n, classes])
// and losses ([n]), from `forward`; width: the samples' (Loader::sample_format).
struct FlippedScores {
  std::vector<float> probs, losses;
};
FlippedScores flipped_scores(Forward& forward, const HostBatch& b, int classes, int width);

// The batch's mirror images: a raw batch's samples marked to be mirrored (the CUDA backend mirrors
// them as it normalises them), a float batch's [n, C, H, W] rows of `width` reversed.
void mirror_batch(HostBatch& b, int width);

}  // namespace convoy
