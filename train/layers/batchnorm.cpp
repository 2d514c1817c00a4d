// CPU reference batch norm; channels run in parallel and sums are taken in double so that the
// statistics do not drift with large batches.
#include "train/layers/batchnorm.h"

#include <algorithm>
#include <cmath>

namespace convoy {

void bn_forward_train(const BnShape& s, const float* x, const float* gamma, const float* beta,
                      float* y, float* save_mean, float* save_invstd, float* running_mean,
                      float* running_var) {
  const size_t per_c = size_t(s.n) * s.hw, img = size_t(s.c) * s.hw;
#pragma omp parallel for schedule(static)
  for (int c = 0; c < s.c; ++c) {
    double sum = 0, sq = 0;
    for (int n = 0; n < s.n; ++n) {
      const float* p = x + n * img + size_t(c) * s.hw;
      for (int i = 0; i < s.hw; ++i) {
        sum += p[i];
        sq += double(p[i]) * p[i];
      }
    }
    const double mean = sum / per_c;
    const double var = std::max(0.0, sq / per_c - mean * mean);
    const float invstd = float(1.0 / std::sqrt(var + s.eps));
    save_mean[c] = float(mean);
    save_invstd[c] = invstd;
    const double unbiased = per_c > 1 ? var * per_c / (per_c - 1) : var;
    running_mean[c] = (1 - s.momentum) * running_mean[c] + s.momentum * float(mean);
    running_var[c] = (1 - s.momentum) * running_var[c] + s.momentum * float(unbiased);
    const float a = gamma[c] * invstd, b = beta[c] - float(mean) * a;
    for (int n = 0; n < s.n; ++n) {
      const float* p = x + n * img + size_t(c) * s.hw;
      float* q = y + n * img + size_t(c) * s.hw;
      for (int i = 0; i < s.hw; ++i) q[i] = p[i] * a + b;
    }
  }
}

void bn_forward_eval(const BnShape& s, const float* x, const float* gamma, const float* beta,
                     const float* running_mean, const float* running_var, float* y) {
  const size_t img = size_t(s.c) * s.hw;
#pragma omp parallel for schedule(static)
  for (int c = 0; c < s.c; ++c) {
    const float a = gamma[c] / std::sqrt(running_var[c] + s.eps);
    const float b = beta[c] - running_mean[c] * a;
    for (int n = 0; n < s.n; ++n) {
      const float* p = x + n * img + size_t(c) * s.hw;
      float* q = y + n * img + size_t(c) * s.hw;
      for (int i = 0; i < s.hw; ++i) q[i] = p[i] * a + b;
    }
  }
}

void bn_backward(const BnShape& s, const float* x, const float* dy, const float* gamma,
                 const float* save_mean, const float* save_invstd, float* dx, float* dgamma,
                 float* dbeta) {
  const size_t per_c = size_t(s.n) * s.hw, img = size_t(s.c) * s.hw;
#pragma omp parallel for schedule(static)
  for (int c = 0; c < s.c; ++c) {
    const float mean = save_mean[c], invstd = save_invstd[c];
    double sdy = 0, sdy_xhat = 0;
    for (int n = 0; n < s.n; ++n) {
      const float* p = x + n * img + size_t(c) * s.hw;
      const float* g = dy + n * img + size_t(c) * s.hw;
      for (int i = 0; i < s.hw; ++i) {
        sdy += g[i];
        sdy_xhat += double(g[i]) * (p[i] - mean) * invstd;
      }
    }
    dgamma[c] = float(sdy_xhat);
    dbeta[c] = float(sdy);
    if (!dx) continue;
    // dx = gamma * invstd * (dy - mean(dy) - xhat * mean(dy * xhat))
    const float m_dy = float(sdy / per_c), m_dyx = float(sdy_xhat / per_c);
    const float k = gamma[c] * invstd;
    for (int n = 0; n < s.n; ++n) {
      const float* p = x + n * img + size_t(c) * s.hw;
      const float* g = dy + n * img + size_t(c) * s.hw;
      float* q = dx + n * img + size_t(c) * s.hw;
      for (int i = 0; i < s.hw; ++i) q[i] = k * (g[i] - m_dy - (p[i] - mean) * invstd * m_dyx);
    }
  }
}

}  // namespace convoy
