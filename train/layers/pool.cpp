// CPU reference pooling, one OpenMP task per (image, channel) plane; max pool records where each
// maximum came from so that backward is a scatter.
#include "train/layers/pool.h"

#include <cstring>
#include <limits>

namespace convoy {

void max_pool_forward(const PoolShape& s, const float* x, float* y, int32_t* argmax) {
  const int ho = s.h_out(), wo = s.w_out(), planes = s.n * s.c;
#pragma omp parallel for schedule(static)
  for (int p = 0; p < planes; ++p) {
    const float* in = x + size_t(p) * s.h_in * s.w_in;
    float* out = y + size_t(p) * ho * wo;
    int32_t* am = argmax + size_t(p) * ho * wo;
    for (int oy = 0; oy < ho; ++oy)
      for (int ox = 0; ox < wo; ++ox) {
        float best = -std::numeric_limits<float>::infinity();
        int32_t where = -1;
        for (int i = 0; i < s.kh; ++i) {
          const int iy = oy * s.stride - s.pad + i;
          if (iy < 0 || iy >= s.h_in) continue;
          for (int j = 0; j < s.kw; ++j) {
            const int ix = ox * s.stride - s.pad + j;
            if (ix < 0 || ix >= s.w_in) continue;
            // Selects instead of a branch: which element wins is data-dependent and unpredictable.
            const float v = in[iy * s.w_in + ix];
            const bool take = where < 0 || v > best;
            best = take ? v : best;
            where = take ? iy * s.w_in + ix : where;
          }
        }
        out[oy * wo + ox] = best;
        am[oy * wo + ox] = where;
      }
  }
}

void max_pool_backward(const PoolShape& s, const float* dy, const int32_t* argmax, float* dx) {
  const int ho = s.h_out(), wo = s.w_out(), planes = s.n * s.c;
#pragma omp parallel for schedule(static)
  for (int p = 0; p < planes; ++p) {
    float* in = dx + size_t(p) * s.h_in * s.w_in;
    std::memset(in, 0, sizeof(float) * s.h_in * s.w_in);
    const float* out = dy + size_t(p) * ho * wo;
    const int32_t* am = argmax + size_t(p) * ho * wo;
    for (int i = 0; i < ho * wo; ++i)
      if (am[i] >= 0) in[am[i]] += out[i];
  }
}

void avg_pool_forward(const PoolShape& s, const float* x, float* y) {
  const int ho = s.h_out(), wo = s.w_out(), planes = s.n * s.c;
  const float scale = 1.f / float(s.kh * s.kw);
#pragma omp parallel for schedule(static)
  for (int p = 0; p < planes; ++p) {
    const float* in = x + size_t(p) * s.h_in * s.w_in;
    float* out = y + size_t(p) * ho * wo;
    for (int oy = 0; oy < ho; ++oy)
      for (int ox = 0; ox < wo; ++ox) {
        float sum = 0.f;
        for (int i = 0; i < s.kh; ++i) {
          const int iy = oy * s.stride - s.pad + i;
          if (iy < 0 || iy >= s.h_in) continue;
          for (int j = 0; j < s.kw; ++j) {
            const int ix = ox * s.stride - s.pad + j;
            if (ix >= 0 && ix < s.w_in) sum += in[iy * s.w_in + ix];
          }
        }
        out[oy * wo + ox] = sum * scale;
      }
  }
}

void avg_pool_backward(const PoolShape& s, const float* dy, float* dx) {
  const int ho = s.h_out(), wo = s.w_out(), planes = s.n * s.c;
  const float scale = 1.f / float(s.kh * s.kw);
#pragma omp parallel for schedule(static)
  for (int p = 0; p < planes; ++p) {
    float* in = dx + size_t(p) * s.h_in * s.w_in;
    std::memset(in, 0, sizeof(float) * s.h_in * s.w_in);
    const float* out = dy + size_t(p) * ho * wo;
    for (int oy = 0; oy < ho; ++oy)
      for (int ox = 0; ox < wo; ++ox) {
        const float g = out[oy * wo + ox] * scale;
        for (int i = 0; i < s.kh; ++i) {
          const int iy = oy * s.stride - s.pad + i;
          if (iy < 0 || iy >= s.h_in) continue;
          for (int j = 0; j < s.kw; ++j) {
            const int ix = ox * s.stride - s.pad + j;
            if (ix >= 0 && ix < s.w_in) in[iy * s.w_in + ix] += g;
          }
        }
      }
  }
}

void global_avg_pool_forward(int n, int c, int hw, const float* x, float* y) {
#pragma omp parallel for schedule(static)
  for (int p = 0; p < n * c; ++p) {
    const float* in = x + size_t(p) * hw;
    float sum = 0.f;
    for (int i = 0; i < hw; ++i) sum += in[i];
    y[p] = sum / float(hw);
  }
}

void global_avg_pool_backward(int n, int c, int hw, const float* dy, float* dx) {
#pragma omp parallel for schedule(static)
  for (int p = 0; p < n * c; ++p) {
    const float g = dy[p] / float(hw);
    float* in = dx + size_t(p) * hw;
    for (int i = 0; i < hw; ++i) in[i] = g;
  }
}

}  // namespace convoy
