// CUDA twin of pool.cpp. Backward passes gather (each input element sums the outputs whose window
// holds it) rather than scatter with atomics, so gradients are deterministic.
#include <cfloat>

#include "train/layers/gpu_ops.h"

namespace convoy::gpu {
namespace {

// The outputs whose window covers input row/column `in`: [first, last].
__device__ inline void covering(int in, int pad, int k, int stride, int out_size, int* first, int* last) {
  const int p = in + pad;
  *first = p < k ? 0 : (p - k) / stride + 1;
  *last = min(p / stride, out_size - 1);
}

__global__ void max_fwd(PoolShape s, int ho, int wo, size_t total, const float* __restrict__ x, float* __restrict__ y,
                        int32_t* __restrict__ argmax) {
  CONVOY_GRID_STRIDE(idx, total) {
    const int ox = idx % wo, oy = (idx / wo) % ho;
    const size_t plane = idx / (size_t(ho) * wo);
    const float* in = x + plane * s.h_in * s.w_in;
    float best = -INFINITY;
    int32_t where = -1;
    for (int i = 0; i < s.kh; ++i) {
      const int iy = oy * s.stride - s.pad + i;
      if (iy < 0 || iy >= s.h_in) continue;
      for (int j = 0; j < s.kw; ++j) {
        const int ix = ox * s.stride - s.pad + j;
        if (ix < 0 || ix >= s.w_in) continue;
        const float v = in[iy * s.w_in + ix];
        if (where < 0 || v > best) {  // the first maximum wins, as on the CPU
          best = v;
          where = iy * s.w_in + ix;
        }
      }
    }
    y[idx] = best;
    argmax[idx] = where;
  }
}

__global__ void max_bwd(PoolShape s, int ho, int wo, size_t total, const float* __restrict__ dy, const int32_t* __restrict__ argmax,
                        float* __restrict__ dx) {
  CONVOY_GRID_STRIDE(idx, total) {
    const int ix = idx % s.w_in, iy = (idx / s.w_in) % s.h_in;
    const size_t plane = idx / (size_t(s.h_in) * s.w_in);
    const int here = iy * s.w_in + ix;
    int y0, y1, x0, x1;
    covering(iy, s.pad, s.kh, s.stride, ho, &y0, &y1);
    covering(ix, s.pad, s.kw, s.stride, wo, &x0, &x1);
    float sum = 0.f;
    for (int oy = y0; oy <= y1; ++oy)
      for (int ox = x0; ox <= x1; ++ox) {
        const size_t o = plane * ho * wo + size_t(oy) * wo + ox;
        if (argmax[o] == here) sum += dy[o];
      }
    dx[idx] = sum;
  }
}

__global__ void avg_fwd(PoolShape s, int ho, int wo, size_t total, const float* __restrict__ x, float* __restrict__ y) {
  const float scale = 1.f / float(s.kh * s.kw);
  CONVOY_GRID_STRIDE(idx, total) {
    const int ox = idx % wo, oy = (idx / wo) % ho;
    const float* in = x + idx / (size_t(ho) * wo) * s.h_in * s.w_in;
    float sum = 0.f;
    for (int i = 0; i < s.kh; ++i) {
      const int iy = oy * s.stride - s.pad + i;
      if (iy < 0 || iy >= s.h_in) continue;
      for (int j = 0; j < s.kw; ++j) {
        const int ix = ox * s.stride - s.pad + j;
        if (ix >= 0 && ix < s.w_in) sum += in[iy * s.w_in + ix];
      }
    }
    y[idx] = sum * scale;
  }
}

__global__ void avg_bwd(PoolShape s, int ho, int wo, size_t total, const float* __restrict__ dy, float* __restrict__ dx) {
  const float scale = 1.f / float(s.kh * s.kw);
  CONVOY_GRID_STRIDE(idx, total) {
    const int ix = idx % s.w_in, iy = (idx / s.w_in) % s.h_in;
    const size_t plane = idx / (size_t(s.h_in) * s.w_in);
    int y0, y1, x0, x1;
    covering(iy, s.pad, s.kh, s.stride, ho, &y0, &y1);
    covering(ix, s.pad, s.kw, s.stride, wo, &x0, &x1);
    float sum = 0.f;
    for (int oy = y0; oy <= y1; ++oy)
      for (int ox = x0; ox <= x1; ++ox) sum += dy[plane * ho * wo + size_t(oy) * wo + ox];
    dx[idx] = sum * scale;
  }
}

// One warp per plane: lanes sum strided elements, then a shuffle reduction.
__global__ void gap_fwd(int planes, int hw, const float* __restrict__ x, float* __restrict__ y) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  if (warp >= planes) return;
  const float* in = x + size_t(warp) * hw;
  float sum = 0.f;
  for (int i = lane; i < hw; i += 32) sum += in[i];
  for (int off = 16; off > 0; off /= 2) sum += __shfl_down_sync(0xffffffffu, sum, off);
  if (lane == 0) y[warp] = sum / float(hw);
}

__global__ void gap_bwd(int planes, int hw, const float* __restrict__ dy, float* __restrict__ dx) {
  CONVOY_GRID_STRIDE(idx, size_t(planes) * hw) dx[idx] = dy[idx / hw] / float(hw);
}

}  // namespace

void max_pool_forward(Context& ctx, const PoolShape& s, const float* x, float* y, int32_t* argmax) {
  max_fwd<<<grid_for(s.out_count()), 256, 0, ctx.stream()>>>(s, s.h_out(), s.w_out(), s.out_count(), x, y, argmax);
  CONVOY_CUDA_CHECK_LAUNCH();
}

void max_pool_backward(Context& ctx, const PoolShape& s, const float* dy, const int32_t* argmax, float* dx) {
  max_bwd<<<grid_for(s.in_count()), 256, 0, ctx.stream()>>>(s, s.h_out(), s.w_out(), s.in_count(), dy, argmax, dx);
  CONVOY_CUDA_CHECK_LAUNCH();
}

void avg_pool_forward(Context& ctx, const PoolShape& s, const float* x, float* y) {
  avg_fwd<<<grid_for(s.out_count()), 256, 0, ctx.stream()>>>(s, s.h_out(), s.w_out(), s.out_count(), x, y);
  CONVOY_CUDA_CHECK_LAUNCH();
}

void avg_pool_backward(Context& ctx, const PoolShape& s, const float* dy, float* dx) {
  avg_bwd<<<grid_for(s.in_count()), 256, 0, ctx.stream()>>>(s, s.h_out(), s.w_out(), s.in_count(), dy, dx);
  CONVOY_CUDA_CHECK_LAUNCH();
}

void global_avg_pool_forward(Context& ctx, int n, int c, int hw, const float* x, float* y) {
  const int planes = n * c;
  gap_fwd<<<(planes * 32 + 255) / 256, 256, 0, ctx.stream()>>>(planes, hw, x, y);
  CONVOY_CUDA_CHECK_LAUNCH();
}

void global_avg_pool_backward(Context& ctx, int n, int c, int hw, const float* dy, float* dx) {
  gap_bwd<<<grid_for(size_t(n) * c * hw), 256, 0, ctx.stream()>>>(n * c, hw, dy, dx);
  CONVOY_CUDA_CHECK_LAUNCH();
}

}  // namespace convoy::gpu
