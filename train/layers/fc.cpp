// CPU reference fully connected layer: three sgemm calls, bias added row by row; the batch is
// the sgemm's M, so one call covers it.
#include "train/layers/fc.h"

#include <cblas.h>

namespace convoy {

void fc_forward(const FcShape& s, const float* x, const float* w, const float* b, float* y) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s.n, s.out, s.in, 1.f, x, s.in, w, s.in, 0.f,
              y, s.out);
  if (b)
    for (int n = 0; n < s.n; ++n)
      for (int o = 0; o < s.out; ++o) y[size_t(n) * s.out + o] += b[o];
}

void fc_backward(const FcShape& s, const float* x, const float* w, const float* dy, float* dx,
                 float* dw, float* db) {
  // dw [out, in] = dy^T [out, n] * x [n, in]
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, s.out, s.in, s.n, 1.f, dy, s.out, x, s.in,
              0.f, dw, s.in);
  if (dx)  // dx [n, in] = dy [n, out] * w [out, in]
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s.n, s.in, s.out, 1.f, dy, s.out, w, s.in,
                0.f, dx, s.in);
  if (db)
    for (int o = 0; o < s.out; ++o) {
      float sum = 0.f;
      for (int n = 0; n < s.n; ++n) sum += dy[size_t(n) * s.out + o];
      db[o] = sum;
    }
}

}  // namespace convoy
