// CPU reference optimiser updates, elementwise over the flat weights (LARS: per tensor); the
// formulas are PyTorch's (LARS: MLPerf's) so that the reference recipes carry over.
#include "train/optimizer_update.h"

#include <cmath>
#include <vector>

namespace convoy {

void sgd_update(size_t n, float* w, const float* g, float* buf, float lr, float momentum, bool nesterov,
                float weight_decay, const uint32_t* no_decay) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) {
    const float d = g[i] + decay_of(i, weight_decay, no_decay) * w[i];
    buf[i] = momentum * buf[i] + d;
    w[i] -= lr * (nesterov ? d + momentum * buf[i] : buf[i]);
  }
}

void adam_update(size_t n, float* w, const float* g, float* m, float* v, float lr, float beta1, float beta2, float eps,
                 float weight_decay, bool decoupled, long long t, const uint32_t* no_decay) {
  const float c1 = 1.f - float(std::pow(double(beta1), double(t)));
  const float c2 = 1.f - float(std::pow(double(beta2), double(t)));
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) {
    float d = g[i];
    const float wd = decay_of(i, weight_decay, no_decay);
    if (decoupled)
      w[i] -= lr * wd * w[i];
    else
      d += wd * w[i];
    m[i] = beta1 * m[i] + (1 - beta1) * d;
    v[i] = beta2 * v[i] + (1 - beta2) * d * d;
    w[i] -= lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + eps);
  }
}

// The tensors' rates: the squared norms summed chunk by chunk in parallel, each chunk in element
// order, then the chunks of a tensor in their order, whatever the thread count (optimizer_update.cu
// does the same), so that a resumed run repeats the uninterrupted one.
void lars_update(const LarsPlan& plan, float* w, const float* g, float* buf, float lr, float momentum, bool nesterov,
                 float weight_decay, float eta, float eps) {
  const long chunks = long(plan.chunks.size());
  std::vector<double> sums(2 * plan.chunks.size(), 0.0);
#pragma omp parallel for schedule(static)
  for (long c = 0; c < chunks; ++c) {
    const LarsChunk& ch = plan.chunks[size_t(c)];
    if (!plan.tensors[ch.tensor].adapt) continue;
    double w2 = 0, g2 = 0;
    for (size_t i = ch.lo; i < ch.hi; ++i) {
      w2 += double(w[i]) * double(w[i]);
      g2 += double(g[i]) * double(g[i]);
    }
    sums[2 * size_t(c)] = w2;
    sums[2 * size_t(c) + 1] = g2;
  }
  std::vector<float> rates(plan.tensors.size(), lr);
  for (size_t t = 0; t < plan.tensors.size(); ++t) {
    const LarsTensor& tn = plan.tensors[t];
    if (!tn.adapt) continue;
    double w2 = 0, g2 = 0;
    for (size_t c = tn.first_chunk; c < size_t(tn.first_chunk) + tn.chunks; ++c)
      w2 += sums[2 * c], g2 += sums[2 * c + 1];
    rates[t] = lars_rate(w2, g2, lr, eta, weight_decay, eps);
  }
#pragma omp parallel for schedule(static)
  for (long c = 0; c < chunks; ++c) {
    const LarsChunk& ch = plan.chunks[size_t(c)];
    const float rate = rates[ch.tensor], decay = plan.tensors[ch.tensor].adapt ? weight_decay : 0.f;
    for (size_t i = ch.lo; i < ch.hi; ++i) w[i] = lars_element(w[i], g[i], buf[i], rate, decay, momentum, nesterov);
  }
}

}  // namespace convoy
