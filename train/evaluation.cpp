// Evaluation: the set opened against the training data's record (shape, classes, mean and std);
// per-rank sums of loss, top-1, top-5 and samples, added up over the ranks once at the end.
#include "train/evaluation.h"

#include <algorithm>

#include "shared/atomic_file.h"
#include "shared/error.h"
#include "train/data_parallel.h"

namespace convoy {
namespace {

struct EvalSums {
  double loss = 0, top1 = 0, top5 = 0, samples = 0;
};

EvalResult over_ranks(const EvalSums& s) {
  double v[4] = {s.loss, s.top1, s.top5, s.samples};
  sum_over_ranks(v, 4);
  EvalResult r;
  r.samples = (long long)v[3];
  if (v[3] > 0) {
    r.loss = v[0] / v[3];
    r.top1 = v[1] / v[3];
    r.top5 = v[2] / v[3];
  }
  return r;
}

std::string class_difference(const std::vector<std::string>& given, const std::vector<std::string>& trained) {
  if (given.size() != trained.size())
    return std::to_string(given.size()) + " vs " + std::to_string(trained.size()) + " classes";
  for (size_t i = 0; i < given.size(); ++i)
    if (given[i] != trained[i])
      return "class " + std::to_string(i) + " is '" + given[i] + "', the training data's is '" + trained[i] + "'";
  return "";
}

}  // namespace

void check_evaluable(const DatasetMeta& meta, const std::string& dir, const DataIdentity& trained_on) {
  if (!(meta.shape == trained_on.shape))
    fail_file(join_path(dir, kDatasetJson), "image shape " + shape_text(meta.shape) +
                                                " differs from the training data's " + shape_text(trained_on.shape));
  const std::string d = class_difference(meta.classes, trained_on.classes);
  if (!d.empty()) fail_file(join_path(dir, kDatasetJson), "class names differ from the training data's (" + d + ")");
}

std::unique_ptr<Loader> make_eval_loader(const LoaderOptions& lo, const DataIdentity& trained_on) {
  if (lo.train) fail("make_eval_loader: given the options of a training pass (internal error)");
  DatasetMeta meta = read_dataset_meta(lo.dir);
  check_evaluable(meta, lo.dir, trained_on);
  meta.mean = trained_on.mean;
  meta.std = trained_on.std;
  return std::make_unique<Loader>(lo, meta);
}

void count_correct(int n, int classes, const float* probs, const int32_t* labels, double& top1, double& top5) {
  for (int i = 0; i < n; ++i) {
    const float* p = probs + size_t(i) * classes;
    const float mine = p[labels[i]];
    int above = 0;
    for (int k = 0; k < classes; ++k)
      if (p[k] > mine || (p[k] == mine && k < labels[i])) ++above;
    top1 += above == 0;
    top5 += above < 5;
  }
}

void mirror_batch(HostBatch& b, int width) {
  if (!b.pixels.empty()) {
    for (uint8_t& f : b.flips) f ^= 1;
    return;
  }
  for (size_t row = 0; row + size_t(width) <= b.x.size(); row += size_t(width))
    std::reverse(b.x.begin() + long(row), b.x.begin() + long(row + size_t(width)));
}

FlippedScores flipped_scores(Forward& forward, const HostBatch& b, int classes, int width) {
  forward.evaluate(b);
  FlippedScores f{{forward.probs(), forward.probs() + size_t(b.n) * classes},
                  {forward.losses(), forward.losses() + b.n}};
  HostBatch m = b;
  mirror_batch(m, width);
  forward.evaluate(m);
  for (size_t i = 0; i < f.probs.size(); ++i) f.probs[i] = 0.5f * (f.probs[i] + forward.probs()[i]);
  for (size_t i = 0; i < f.losses.size(); ++i) f.losses[i] = 0.5f * (f.losses[i] + forward.losses()[i]);
  return f;
}

EvalResult evaluate(Forward& forward, Loader& loader, int classes, bool flip) {
  loader.start_epoch(0);
  const int width = loader.sample_format().width;
  HostBatch b;
  EvalSums s;
  while (loader.next(b)) {
    s.samples += b.n;
    if (flip) {
      const FlippedScores f = flipped_scores(forward, b, classes, b.width > 0 ? b.width : width);
      for (float l : f.losses) s.loss += l;
      count_correct(b.n, classes, f.probs.data(), b.labels.data(), s.top1, s.top5);
      continue;
    }
    forward.evaluate(b);
    const float* losses = forward.losses();
    for (int i = 0; i < b.n; ++i) s.loss += losses[i];
    count_correct(b.n, classes, forward.probs(), b.labels.data(), s.top1, s.top5);
  }
  return over_ranks(s);
}

}  // namespace convoy
