// CPU reference convolution: per image and group, im2col into a per-thread buffer and one sgemm;
// images are spread over OpenMP threads, each with its own BLAS call running single-threaded.
#include "train/layers/conv.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace convoy {
namespace {

bool is_pointwise(const ConvShape& s) {
  return s.kh == 1 && s.kw == 1 && s.stride == 1 && s.pad == 0;
}

// col[(c * kh + i) * kw + j][oy * wo + ox] = x[c][oy * stride - pad + i][ox * stride - pad + j]
void im2col(const ConvShape& s, int channels, const float* x, float* col) {
  const int ho = s.h_out(), wo = s.w_out();
  for (int c = 0; c < channels; ++c)
    for (int i = 0; i < s.kh; ++i)
      for (int j = 0; j < s.kw; ++j) {
        float* out = col + ((size_t(c) * s.kh + i) * s.kw + j) * ho * wo;
        const float* plane = x + size_t(c) * s.h_in * s.w_in;
        for (int oy = 0; oy < ho; ++oy) {
          const int iy = oy * s.stride - s.pad + i;
          float* row = out + size_t(oy) * wo;
          if (iy < 0 || iy >= s.h_in) {
            std::fill(row, row + wo, 0.f);
            continue;
          }
          const float* in = plane + size_t(iy) * s.w_in;
          // Output columns whose input column lies inside the image: [lo, hi).
          const int lo = std::min(wo, std::max(0, (s.pad - j + s.stride - 1) / s.stride));
          const int hi = std::max(lo, std::min(wo, (s.w_in + s.pad - j + s.stride - 1) / s.stride));
          std::fill(row, row + lo, 0.f);
          std::fill(row + hi, row + wo, 0.f);
          const float* src = in + lo * s.stride - s.pad + j;
          if (s.stride == 1)
            std::memcpy(row + lo, src, sizeof(float) * (hi - lo));
          else
            for (int ox = lo; ox < hi; ++ox) row[ox] = src[(ox - lo) * s.stride];
        }
      }
}

// The adjoint of im2col: adds every column entry back onto the input pixel it came from.
void col2im(const ConvShape& s, int channels, const float* col, float* x) {
  const int ho = s.h_out(), wo = s.w_out();
  std::memset(x, 0, sizeof(float) * channels * s.h_in * s.w_in);
  for (int c = 0; c < channels; ++c)
    for (int i = 0; i < s.kh; ++i)
      for (int j = 0; j < s.kw; ++j) {
        const float* in = col + ((size_t(c) * s.kh + i) * s.kw + j) * ho * wo;
        float* plane = x + size_t(c) * s.h_in * s.w_in;
        for (int oy = 0; oy < ho; ++oy) {
          const int iy = oy * s.stride - s.pad + i;
          if (iy < 0 || iy >= s.h_in) continue;
          float* out = plane + size_t(iy) * s.w_in;
          const float* row = in + size_t(oy) * wo;
          const int lo = std::min(wo, std::max(0, (s.pad - j + s.stride - 1) / s.stride));
          const int hi = std::max(lo, std::min(wo, (s.w_in + s.pad - j + s.stride - 1) / s.stride));
          float* dst = out + lo * s.stride - s.pad + j;
          if (s.stride == 1) {
#pragma omp simd
            for (int ox = lo; ox < hi; ++ox) dst[ox - lo] += row[ox];
          } else {
            for (int ox = lo; ox < hi; ++ox) dst[(ox - lo) * s.stride] += row[ox];
          }
        }
      }
}

}  // namespace

void conv_forward(const ConvShape& s, const float* x, const float* w, const float* b, float* y) {
  const int cg_in = s.c_in / s.groups, cg_out = s.c_out / s.groups;
  const int K = cg_in * s.kh * s.kw, P = s.h_out() * s.w_out();
  const size_t in_img = size_t(s.c_in) * s.h_in * s.w_in, out_img = size_t(s.c_out) * P;
  const bool pointwise = is_pointwise(s);
#pragma omp parallel
  {
    std::vector<float> col(pointwise ? 0 : size_t(K) * P);
#pragma omp for schedule(static)
    for (int n = 0; n < s.n; ++n) {
      for (int g = 0; g < s.groups; ++g) {
        const float* xg = x + n * in_img + size_t(g) * cg_in * s.h_in * s.w_in;
        float* yg = y + n * out_img + size_t(g) * cg_out * P;
        const float* src = xg;
        if (!pointwise) {
          im2col(s, cg_in, xg, col.data());
          src = col.data();
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, cg_out, P, K, 1.f,
                    w + size_t(g) * cg_out * K, K, src, P, 0.f, yg, P);
      }
      for (int c = 0; b && c < s.c_out; ++c) {
        float* row = y + n * out_img + size_t(c) * P;
        const float bias = b[c];
        for (int p = 0; p < P; ++p) row[p] += bias;
      }
      if (s.relu) {
        float* img = y + n * out_img;
        for (size_t i = 0; i < out_img; ++i) img[i] = img[i] > 0.f ? img[i] : 0.f;
      }
    }
  }
}

void conv_backward(const ConvShape& s, const float* x, const float* w, const float* y,
                   const float* dy_in, float* dx, float* dw, float* db) {
  const int cg_in = s.c_in / s.groups, cg_out = s.c_out / s.groups;
  const int K = cg_in * s.kh * s.kw, P = s.h_out() * s.w_out();
  const size_t in_img = size_t(s.c_in) * s.h_in * s.w_in, out_img = size_t(s.c_out) * P;
  const bool pointwise = is_pointwise(s);
  const size_t wn = s.weight_count();
  const int threads = omp_get_max_threads();
  // Per-thread partial sums, added in thread order so the result does not depend on timing.
  std::vector<float> dw_part(size_t(threads) * wn, 0.f), db_part(size_t(threads) * s.c_out, 0.f);
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num();
    float* my_dw = dw_part.data() + size_t(t) * wn;
    float* my_db = db_part.data() + size_t(t) * s.c_out;
    std::vector<float> col(pointwise ? 0 : size_t(K) * P);
    std::vector<float> dcol(pointwise || !dx ? 0 : size_t(K) * P);
    std::vector<float> masked(s.relu ? out_img : 0);
#pragma omp for schedule(static)
    for (int n = 0; n < s.n; ++n) {
      // This image's output gradient; with the fused ReLU, masked where the output was not positive.
      const float* dyn = dy_in + n * out_img;
      if (s.relu) {
        const float* yi = y + n * out_img;
        for (size_t i = 0; i < out_img; ++i) {
          const float g = dyn[i];  // loaded unconditionally: a blend, not a branch
          masked[i] = yi[i] > 0.f ? g : 0.f;
        }
        dyn = masked.data();
      }
      for (int g = 0; g < s.groups; ++g) {
        const float* xg = x + n * in_img + size_t(g) * cg_in * s.h_in * s.w_in;
        const float* dyg = dyn + size_t(g) * cg_out * P;
        const float* wg = w + size_t(g) * cg_out * K;
        const float* src = xg;
        if (!pointwise) {
          im2col(s, cg_in, xg, col.data());
          src = col.data();
        }
        // dw_g += dy_g [cg_out, P] * col^T [P, K]
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, cg_out, K, P, 1.f, dyg, P, src, P, 1.f,
                    my_dw + size_t(g) * cg_out * K, K);
        if (dx) {
          float* dxg = dx + n * in_img + size_t(g) * cg_in * s.h_in * s.w_in;
          // dcol = w_g^T [K, cg_out] * dy_g [cg_out, P]
          float* dst = pointwise ? dxg : dcol.data();
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, P, cg_out, 1.f, wg, K, dyg, P, 0.f,
                      dst, P);
          if (!pointwise) col2im(s, cg_in, dcol.data(), dxg);
        }
      }
      if (db)
        for (int c = 0; c < s.c_out; ++c) {
          const float* row = dyn + size_t(c) * P;
          float sum = 0.f;
          for (int p = 0; p < P; ++p) sum += row[p];
          my_db[c] += sum;
        }
    }
  }
  std::copy(dw_part.begin(), dw_part.begin() + wn, dw);
  for (int t = 1; t < threads; ++t)
    for (size_t i = 0; i < wn; ++i) dw[i] += dw_part[size_t(t) * wn + i];
  if (db) {
    std::copy(db_part.begin(), db_part.begin() + s.c_out, db);
    for (int t = 1; t < threads; ++t)
      for (int c = 0; c < s.c_out; ++c) db[c] += db_part[size_t(t) * s.c_out + c];
  }
}

}  // namespace convoy
