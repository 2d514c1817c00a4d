// Evaluation: per-rank sums of loss, top-1, top-5 and samples, added up over the ranks once at the
// end, so that every rank returns the same figures.
#include "train/evaluation.h"

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

}  // namespace

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

EvalResult evaluate(Forward& forward, Loader& loader, int classes) {
  loader.start_epoch(0);
  HostBatch b;
  EvalSums s;
  while (loader.next(b)) {
    forward.evaluate(b);
    const float* losses = forward.losses();
    for (int i = 0; i < b.n; ++i) s.loss += losses[i];
    count_correct(b.n, classes, forward.probs(), b.labels.data(), s.top1, s.top5);
    s.samples += b.n;
  }
  return over_ranks(s);
}

}  // namespace convoy
