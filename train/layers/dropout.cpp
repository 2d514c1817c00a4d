// CPU reference dropout: the mask comes from a counter hash, so any thread split (and the GPU)
// draws the same one.
#include "train/layers/dropout.h"

#include <cstring>

#include "train/layers/elementwise.h"
#include "train/layers/layer_keys.h"

namespace convoy {

void dropout_forward(const DropoutShape& s, uint64_t key, const uint64_t* sample_keys, const float* x, float* y,
                     float* mask) {
  const float keep = 1.f / (1.f - s.p);
#pragma omp parallel for schedule(static) if (size_t(s.n) * s.per_sample > kParallelMin)
  for (int n = 0; n < s.n; ++n)
    for (size_t i = 0; i < s.per_sample; ++i) {
      const size_t k = n * s.per_sample + i;
      mask[k] = counter_uniform(key, sample_keys[n], i) < s.p ? 0.f : keep;
      y[k] = x[k] * mask[k];
    }
}

void dropout_backward(const DropoutShape& s, const float* mask, const float* dy, float* dx) {
  const size_t count = size_t(s.n) * s.per_sample;
#pragma omp parallel for simd schedule(static) if (count > kParallelMin)
  for (size_t i = 0; i < count; ++i) dx[i] = dy[i] * mask[i];
}

std::shared_ptr<const OpParams> DropoutOp::parse(const LayerKeys& k) const {
  auto p = std::make_shared<DropoutParams>();
  p->p = float(k.get_num("p", 0.5, 0, 0.99));
  return p;
}

OpShape DropoutOp::shape(const ShapeIn& s) const {
  OpShape o;
  o.out = s.in[0];
  o.flops = double(s.in[0].size());
  return o;
}

CpuBuffers DropoutOp::cpu_buffers(const Node& nd, int n) const { return {size_t(n) * nd.out.size(), 0}; }

// Evaluation, or p = 0: the identity.
double DropoutOp::forward(const CpuLayer& l) const {
  const float p = params_of<DropoutParams>(l.node.spec).p;
  if (l.train && p > 0)
    dropout_forward({l.n, l.node.out.size(), p}, l.key ^ dropout_salt(l.index), l.sample_keys, l.x[0], l.y,
                    l.node.aux.data());
  else
    std::memcpy(l.y, l.x[0], l.count() * sizeof(float));
  return 0;
}

void DropoutOp::backward(const CpuLayer& l, int) const {
  if (!l.dx) return;
  const float p = params_of<DropoutParams>(l.node.spec).p;
  if (l.train && p > 0)
    dropout_backward({l.n, l.node.out.size(), p}, l.node.aux.data(), l.dy, l.dx);
  else
    std::memcpy(l.dx, l.dy, l.count() * sizeof(float));
}

const Op& dropout_op() {
  static const DropoutOp op;
  return op;
}

}  // namespace convoy
