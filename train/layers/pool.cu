// CUDA twin of pool.cpp, for fp32 or bf16 elements in NCHW or NHWC. Backward passes gather (each
// input element sums the outputs whose window holds it) rather than scatter with atomics, so
// gradients are deterministic.
#include <cfloat>

#include "train/layers/gpu_ops.h"
#include "train/layers/layout.cuh"
#include "train/layers/storage.cuh"

namespace convoy::gpu {
namespace {

// The outputs whose window covers input row/column `in`: [first, last].
__device__ inline void covering(int in, int pad, int k, int stride, int out_size, int* first, int* last) {
  const int p = in + pad;
  *first = p < k ? 0 : (p - k) / stride + 1;
  *last = min(p / stride, out_size - 1);
}

#define CONVOY_GRID_STRIDE_AS(Index, i, n) \
  for (Index i = blockIdx.x * Index(blockDim.x) + threadIdx.x; i < (n); i += Index(gridDim.x) * blockDim.x)

template <typename T, Layout L, typename Index>
__global__ void max_fwd(PoolShape s, int ho, int wo, Index total, const T* __restrict__ x, T* __restrict__ y,
                        int32_t* __restrict__ argmax) {
  const int st = Planes<L>::stride(s.c);
  CONVOY_GRID_STRIDE_AS(Index, idx, total) {
    int oy, ox;
    size_t in;
    Planes<L>::locate(idx, s.c, ho, wo, s.h_in, s.w_in, oy, ox, in);
    float best = -INFINITY;
    int32_t where = -1;
    for (int i = 0; i < s.kh; ++i) {
      const int iy = oy * s.stride - s.pad + i;
      if (iy < 0 || iy >= s.h_in) continue;
      for (int j = 0; j < s.kw; ++j) {
        const int ix = ox * s.stride - s.pad + j;
        if (ix < 0 || ix >= s.w_in) continue;
        const float v = load(x[in + size_t(iy * s.w_in + ix) * st]);
        if (where < 0 || v > best) {  // the first maximum wins, as on the CPU
          best = v;
          where = iy * s.w_in + ix;
        }
      }
    }
    y[idx] = store<T>(best);
    argmax[idx] = where;
  }
}

template <typename T, Layout L, typename Index>
__global__ void max_bwd(PoolShape s, int ho, int wo, Index total, const T* __restrict__ dy,
                        const int32_t* __restrict__ argmax, T* __restrict__ dx) {
  const int st = Planes<L>::stride(s.c);
  CONVOY_GRID_STRIDE_AS(Index, idx, total) {
    int iy, ix;
    size_t out;
    Planes<L>::locate(idx, s.c, s.h_in, s.w_in, ho, wo, iy, ix, out);
    const int here = iy * s.w_in + ix;
    int y0, y1, x0, x1;
    covering(iy, s.pad, s.kh, s.stride, ho, &y0, &y1);
    covering(ix, s.pad, s.kw, s.stride, wo, &x0, &x1);
    float sum = 0.f;
    for (int oy = y0; oy <= y1; ++oy)
      for (int ox = x0; ox <= x1; ++ox) {
        const size_t o = out + size_t(oy * wo + ox) * st;
        if (argmax[o] == here) sum += load(dy[o]);
      }
    dx[idx] = store<T>(sum);
  }
}

template <typename T, Layout L, typename Index>
__global__ void avg_fwd(PoolShape s, int ho, int wo, Index total, const T* __restrict__ x, T* __restrict__ y) {
  const float scale = 1.f / float(s.kh * s.kw);
  const int st = Planes<L>::stride(s.c);
  CONVOY_GRID_STRIDE_AS(Index, idx, total) {
    int oy, ox;
    size_t in;
    Planes<L>::locate(idx, s.c, ho, wo, s.h_in, s.w_in, oy, ox, in);
    float sum = 0.f;
    for (int i = 0; i < s.kh; ++i) {
      const int iy = oy * s.stride - s.pad + i;
      if (iy < 0 || iy >= s.h_in) continue;
      for (int j = 0; j < s.kw; ++j) {
        const int ix = ox * s.stride - s.pad + j;
        if (ix >= 0 && ix < s.w_in) sum += load(x[in + size_t(iy * s.w_in + ix) * st]);
      }
    }
    y[idx] = store<T>(sum * scale);
  }
}

template <typename T, Layout L, typename Index>
__global__ void avg_bwd(PoolShape s, int ho, int wo, Index total, const T* __restrict__ dy, T* __restrict__ dx) {
  const float scale = 1.f / float(s.kh * s.kw);
  const int st = Planes<L>::stride(s.c);
  CONVOY_GRID_STRIDE_AS(Index, idx, total) {
    int iy, ix;
    size_t out;
    Planes<L>::locate(idx, s.c, s.h_in, s.w_in, ho, wo, iy, ix, out);
    int y0, y1, x0, x1;
    covering(iy, s.pad, s.kh, s.stride, ho, &y0, &y1);
    covering(ix, s.pad, s.kw, s.stride, wo, &x0, &x1);
    float sum = 0.f;
    for (int oy = y0; oy <= y1; ++oy)
      for (int ox = x0; ox <= x1; ++ox) sum += load(dy[out + size_t(oy * wo + ox) * st]);
    dx[idx] = store<T>(sum * scale);
  }
}

// NCHW: one warp per plane, lanes sum strided elements, then a shuffle reduction.
template <typename T>
__global__ void gap_fwd_planes(int planes, int hw, const T* __restrict__ x, T* __restrict__ y) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  if (warp >= planes) return;
  const T* in = x + size_t(warp) * hw;
  float sum = 0.f;
  for (int i = lane; i < hw; i += 32) sum += load(in[i]);
  for (int off = 16; off > 0; off /= 2) sum += __shfl_down_sync(0xffffffffu, sum, off);
  if (lane == 0) y[warp] = store<T>(sum / float(hw));
}

// NHWC: one thread per (sample, channel), neighbouring threads on neighbouring channels so that
// each pixel's read coalesces.
template <typename T>
__global__ void gap_fwd_pixels(int n, int c, int hw, const T* __restrict__ x, T* __restrict__ y) {
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= n * c) return;
  const int ch = k % c;
  const T* in = x + size_t(k / c) * hw * c + ch;
  float sum = 0.f;
  for (int p = 0; p < hw; ++p) sum += load(in[size_t(p) * c]);
  y[k] = store<T>(sum / float(hw));
}

template <typename T, Layout L, typename Index>
__global__ void gap_bwd(int c, int hw, Index total, const T* __restrict__ dy, T* __restrict__ dx) {
  CONVOY_GRID_STRIDE_AS(Index, idx, total) {
    const Index from = L == Layout::nchw ? idx / Index(hw) : idx / (Index(hw) * Index(c)) * Index(c) + idx % Index(c);
    dx[idx] = store<T>(load(dy[from]) / float(hw));
  }
}

}  // namespace

template <typename T>
void max_pool_forward(Context& ctx, const PoolShape& s, const T* x, T* y, int32_t* argmax, Layout layout) {
  with_layout(layout, s.out_count(), [&](auto l, auto index) {
    max_fwd<T, decltype(l)::value><<<grid_for(s.out_count()), 256, 0, ctx.stream()>>>(
        s, s.h_out(), s.w_out(), decltype(index)(s.out_count()), x, y, argmax);
  });
  CONVOY_CUDA_CHECK_LAUNCH();
}

template <typename T>
void max_pool_backward(Context& ctx, const PoolShape& s, const T* dy, const int32_t* argmax, T* dx, Layout layout) {
  with_layout(layout, s.in_count(), [&](auto l, auto index) {
    max_bwd<T, decltype(l)::value><<<grid_for(s.in_count()), 256, 0, ctx.stream()>>>(
        s, s.h_out(), s.w_out(), decltype(index)(s.in_count()), dy, argmax, dx);
  });
  CONVOY_CUDA_CHECK_LAUNCH();
}

template <typename T>
void avg_pool_forward(Context& ctx, const PoolShape& s, const T* x, T* y, Layout layout) {
  with_layout(layout, s.out_count(), [&](auto l, auto index) {
    avg_fwd<T, decltype(l)::value><<<grid_for(s.out_count()), 256, 0, ctx.stream()>>>(
        s, s.h_out(), s.w_out(), decltype(index)(s.out_count()), x, y);
  });
  CONVOY_CUDA_CHECK_LAUNCH();
}

template <typename T>
void avg_pool_backward(Context& ctx, const PoolShape& s, const T* dy, T* dx, Layout layout) {
  with_layout(layout, s.in_count(), [&](auto l, auto index) {
    avg_bwd<T, decltype(l)::value><<<grid_for(s.in_count()), 256, 0, ctx.stream()>>>(
        s, s.h_out(), s.w_out(), decltype(index)(s.in_count()), dy, dx);
  });
  CONVOY_CUDA_CHECK_LAUNCH();
}

template <typename T>
void global_avg_pool_forward(Context& ctx, int n, int c, int hw, const T* x, T* y, Layout layout) {
  const int planes = n * c;
  if (layout == Layout::nchw)
    gap_fwd_planes<<<(planes * 32 + 255) / 256, 256, 0, ctx.stream()>>>(planes, hw, x, y);
  else
    gap_fwd_pixels<<<(planes + 255) / 256, 256, 0, ctx.stream()>>>(n, c, hw, x, y);
  CONVOY_CUDA_CHECK_LAUNCH();
}

template <typename T>
void global_avg_pool_backward(Context& ctx, int n, int c, int hw, const T* dy, T* dx, Layout layout) {
  const size_t total = size_t(n) * c * hw;
  with_layout(layout, total, [&](auto l, auto index) {
    gap_bwd<T, decltype(l)::value><<<grid_for(total), 256, 0, ctx.stream()>>>(c, hw, decltype(index)(total), dy, dx);
  });
  CONVOY_CUDA_CHECK_LAUNCH();
}

#define CONVOY_POOL_INSTANTIATE(T)                                                                              \
  template void max_pool_forward<T>(Context&, const PoolShape&, const T*, T*, int32_t*, Layout);               \
  template void max_pool_backward<T>(Context&, const PoolShape&, const T*, const int32_t*, T*, Layout);        \
  template void avg_pool_forward<T>(Context&, const PoolShape&, const T*, T*, Layout);                         \
  template void avg_pool_backward<T>(Context&, const PoolShape&, const T*, T*, Layout);                        \
  template void global_avg_pool_forward<T>(Context&, int, int, int, const T*, T*, Layout);                     \
  template void global_avg_pool_backward<T>(Context&, int, int, int, const T*, T*, Layout);
CONVOY_POOL_INSTANTIATE(float)
CONVOY_POOL_INSTANTIATE(bf16)

}  // namespace convoy::gpu
