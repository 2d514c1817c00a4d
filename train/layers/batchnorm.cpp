// CPU reference batch norm; channels run in parallel and sums are taken in double so that the
// statistics do not drift with large batches.
#include "train/layers/batchnorm.h"

#include <algorithm>
#include <cmath>

#include "train/layers/layer_keys.h"

namespace convoy {

void bn_forward_train(const BnShape& s, const float* x, const float* gamma, const float* beta, float* y,
                      float* save_mean, float* save_invstd, float* running_mean, float* running_var) {
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

void bn_forward_eval(const BnShape& s, const float* x, const float* gamma, const float* beta, const float* running_mean,
                     const float* running_var, float* y) {
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

void bn_backward(const BnShape& s, const float* x, const float* dy, const float* gamma, const float* save_mean,
                 const float* save_invstd, float* dx, float* dgamma, float* dbeta) {
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

std::shared_ptr<const OpParams> BatchNormOp::parse(const LayerKeys& k) const {
  auto p = std::make_shared<BnParams>();
  p->eps = float(k.get_num("eps", 1e-5, 1e-12, 1));
  p->momentum = float(k.get_num("momentum", 0.1, 0, 1));
  return p;
}

// bf16: it runs an only consumer's ReLU or ReLU6 in its own pass, and can leave its output as
// per-channel scale and shift to a consumer that takes it so.
OpFusion BatchNormOp::fusion(const Node&) const {
  OpFusion f;
  f.relu_bf16 = true;
  f.relu6_bf16 = true;
  f.defers_channel_affine = true;
  return f;
}

OpShape BatchNormOp::shape(const ShapeIn& s) const {
  const Dims in = s.in[0];
  OpShape o;
  o.out = in;
  o.weights = o.biases = size_t(in.c);
  o.state = 2 * size_t(in.c);
  o.flops = 2.0 * double(in.size());
  return o;
}

// gamma 1, beta 0, running mean 0 and variance 1, as PyTorch starts them.
bool BatchNormOp::init_params(const Node& nd, float* weights, float* state) const {
  const size_t c = size_t(nd.in_dims[0].c);
  std::fill(weights + nd.w_off, weights + nd.w_off + nd.w_count, 1.f);
  std::fill(weights + nd.b_off, weights + nd.b_off + nd.b_count, 0.f);
  std::fill(state + nd.s_off, state + nd.s_off + c, 0.f);
  std::fill(state + nd.s_off + c, state + nd.s_off + 2 * c, 1.f);
  return true;
}

CpuBuffers BatchNormOp::cpu_buffers(const Node& nd, int) const { return {2 * size_t(nd.in_dims[0].c), 0}; }

double BatchNormOp::forward(const CpuLayer& l) const {
  const BnParams& p = params_of<BnParams>(l.node.spec);
  const Dims in = l.in();
  const BnShape s{l.n, in.c, in.h * in.w, p.eps, p.momentum};
  float* aux = l.node.aux.data();
  if (l.train)
    bn_forward_train(s, l.x[0], l.w, l.b, l.y, aux, aux + in.c, l.state, l.state + in.c);
  else
    bn_forward_eval(s, l.x[0], l.w, l.b, l.state, l.state + in.c, l.y);
  return 0;
}

void BatchNormOp::backward(const CpuLayer& l, int) const {
  const BnParams& p = params_of<BnParams>(l.node.spec);
  const Dims in = l.in();
  const BnShape s{l.n, in.c, in.h * in.w, p.eps, p.momentum};
  const float* aux = l.node.aux.data();
  bn_backward(s, l.x[0], l.dy, l.w, aux, aux + in.c, l.dx, l.dw, l.db);
}

const Op& batch_norm_op() {
  static const BatchNormOp op;
  return op;
}

}  // namespace convoy
