// CPU reference optimiser updates, elementwise over the flat weights; the formulas are PyTorch's
// so that the reference recipe carries over.
#include "train/optimizer_update.h"

#include <cmath>

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

}  // namespace convoy
