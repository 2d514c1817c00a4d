// CPU reference fully connected layer: three sgemm calls on the caller's thread (SerialBlas), bias
// added row by row; the batch is the sgemm's M, so one call covers it.
#include "train/layers/fc.h"

#include <cblas.h>

#include "train/layers/layer_keys.h"
#include "train/layers/serial_blas.h"

namespace convoy {

void fc_forward(const FcShape& s, const float* x, const float* w, const float* b, float* y) {
  const SerialBlas serial;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s.n, s.out, s.in, 1.f, x, s.in, w, s.in, 0.f, y, s.out);
  if (b)
    for (int n = 0; n < s.n; ++n)
      for (int o = 0; o < s.out; ++o) y[size_t(n) * s.out + o] += b[o];
}

void fc_backward(const FcShape& s, const float* x, const float* w, const float* dy, float* dx, float* dw, float* db) {
  const SerialBlas serial;
  // dw [out, in] = dy^T [out, n] * x [n, in]
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, s.out, s.in, s.n, 1.f, dy, s.out, x, s.in, 0.f, dw, s.in);
  if (dx)  // dx [n, in] = dy [n, out] * w [out, in]
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s.n, s.in, s.out, 1.f, dy, s.out, w, s.in, 0.f, dx, s.in);
  if (db)
    for (int o = 0; o < s.out; ++o) {
      float sum = 0.f;
      for (int n = 0; n < s.n; ++n) sum += dy[size_t(n) * s.out + o];
      db[o] = sum;
    }
}

std::shared_ptr<const OpParams> FcOp::parse(const LayerKeys& k) const {
  auto p = std::make_shared<FcParams>();
  if (const auto u = k.get_string("units")) {
    if (*u != "classes") k.fail_at("units", "'units' must be a number or \"classes\"");
    p->units = kClassUnits;
  } else {
    p->units = k.get_int("units", 0, 1, 1 << 24);
    if (p->units == 0) k.fail("fc layer '" + k.name() + "' needs units");
  }
  p->bias = k.get_bool("bias", true);
  return p;
}

std::string FcOp::wants_classes(const LayerSpec& s) const {
  return params_of<FcParams>(s).units == kClassUnits ? "units = \"classes\"" : "";
}

OpShape FcOp::shape(const ShapeIn& s) const {
  const FcParams& p = params_of<FcParams>(s.spec);
  const int units = p.units == kClassUnits ? s.classes : p.units;
  OpShape o;
  o.out = {units, 1, 1};
  o.weights = size_t(units) * s.in[0].size();
  o.biases = p.bias ? size_t(units) : 0;
  o.flops = 2.0 * double(o.weights);
  return o;
}

double FcOp::forward(const CpuLayer& l) const {
  fc_forward({l.n, int(l.in().size()), l.node.out.c}, l.x[0], l.w, l.b, l.y);
  return 0;
}

void FcOp::backward(const CpuLayer& l, int) const {
  fc_backward({l.n, int(l.in().size()), l.node.out.c}, l.x[0], l.w, l.dy, l.dx, l.dw, l.db);
}

const Op& fc_op() {
  static const FcOp op;
  return op;
}

}  // namespace convoy
