// CPU reference softmax cross-entropy, computed with the max subtracted for stability and the
// log-sum in double.
#include "train/layers/softmax_xent.h"

#include <cmath>
#include <cstddef>

namespace convoy {

double softmax_xent_forward(int n, int classes, const float* logits, const int* labels, float* probs, float* loss,
                            float smoothing) {
  double total = 0;
  for (int i = 0; i < n; ++i) {
    const float* z = logits + size_t(i) * classes;
    float* p = probs + size_t(i) * classes;
    float m = z[0];
    for (int k = 1; k < classes; ++k) m = std::max(m, z[k]);
    double sum = 0;
    for (int k = 0; k < classes; ++k) sum += std::exp(double(z[k] - m));
    const double log_sum = std::log(sum);
    for (int k = 0; k < classes; ++k) p[k] = float(std::exp(double(z[k] - m) - log_sum));
    double nll = log_sum - double(z[labels[i]] - m);
    if (smoothing > 0) {  // -mean(log p) = log_sum - mean(z - m)
      double centred = 0;
      for (int k = 0; k < classes; ++k) centred += double(z[k] - m);
      nll = (1 - double(smoothing)) * nll + double(smoothing) * (log_sum - centred / classes);
    }
    loss[i] = float(nll);
    total += loss[i];
  }
  return n > 0 ? total / n : 0.0;
}

void softmax_xent_backward(int n, int classes, const float* probs, const int* labels, float grad_scale, float* dlogits,
                           float smoothing) {
  const SmoothedTarget t = smoothed_target(classes, smoothing);
  for (int i = 0; i < n; ++i)
    for (int k = 0; k < classes; ++k) {
      const size_t j = size_t(i) * classes + k;
      dlogits[j] = (probs[j] - (k == labels[i] ? t.on : t.off)) * grad_scale;
    }
}

OpShape SoftmaxXentOp::shape(const ShapeIn& s) const {
  const Dims in = s.in[0];
  if (in.h != 1 || in.w != 1) s.fail("needs a flat input (fc output), got " + dims_text(in));
  OpShape o;
  o.out = {1, 1, 1};
  o.flops = 4.0 * in.c;
  return o;
}

double SoftmaxXentOp::forward(const CpuLayer& l) const {
  const double loss = softmax_xent_forward(l.n, l.classes, l.x[0], l.labels, l.probs, l.losses,
                                           l.train ? l.label_smoothing : 0.f);
  l.y[0] = float(loss);
  return loss;
}

void SoftmaxXentOp::backward(const CpuLayer& l, int) const {
  if (l.dx)
    softmax_xent_backward(l.n, l.classes, l.probs, l.labels, 1.f / float(l.n), l.dx, l.train ? l.label_smoothing : 0.f);
}

const Op& softmax_xent_op() {
  static const SoftmaxXentOp op;
  return op;
}

}  // namespace convoy
