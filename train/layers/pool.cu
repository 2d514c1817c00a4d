// CUDA twin of pool.cpp, for fp32 or bf16 elements in NCHW or NHWC. Backward passes gather (each
// input element sums the outputs whose window holds it) rather than scatter with atomics, so
// gradients are deterministic. The pooling ops' passes, which call them, come last.
#include <cfloat>
#include <type_traits>

#include "train/cuda/channel_affine.h"
#include "train/cuda/gpu_context.h"
#include "train/cuda/layout.cuh"
#include "train/cuda/storage.cuh"
#include "train/layers/gpu_layer.h"
#include "train/layers/pool.h"

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

// NHWC max pooling over packs of V channels (16 bytes): one thread per output pixel and pack
// forward, per input pixel and pack backward, so the window's index arithmetic is paid once per
// V channels and every access moves 16 bytes. Same choices and sums as max_fwd/max_bwd.
// Affine (bf16): x is a batch norm's input, whose output the batch norm left as scale_shift
// (ChannelAffine), applied here, and its ReLU with `relu`, rounded as the batch norm would have
// stored them; where the ReLU clipped a whole window, the argmax is -1, so that the backward pass
// leaves the gradient there zero, as the ReLU's backward pass would.
template <typename T, int V, bool Affine = false>
__global__ void max_fwd_packs(PoolShape s, int ho, int wo, size_t total, const T* __restrict__ x, T* __restrict__ y,
                              int32_t* __restrict__ argmax, const float2* __restrict__ scale_shift = nullptr,
                              bool relu = false) {
  using P = Pack<T, V>;
  const int cp = s.c / V;
  CONVOY_GRID_STRIDE_AS(size_t, idx, total) {
    const int p = int(idx % cp);
    size_t pix = idx / cp;
    const int ox = int(pix % wo);
    pix /= wo;
    const int oy = int(pix % ho);
    const size_t n = pix / ho;
    const P* in = reinterpret_cast<const P*>(x) + n * s.h_in * s.w_in * cp + p;
    float best[V];
    int32_t where[V];
    float2 ab[V];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      best[j] = -INFINITY, where[j] = -1;
      if constexpr (Affine) ab[j] = scale_shift[p * V + j];
    }
    for (int i = 0; i < s.kh; ++i) {
      const int iy = oy * s.stride - s.pad + i;
      if (iy < 0 || iy >= s.h_in) continue;
      for (int k = 0; k < s.kw; ++k) {
        const int ix = ox * s.stride - s.pad + k;
        if (ix < 0 || ix >= s.w_in) continue;
        const int here = iy * s.w_in + ix;
        const P v = in[size_t(here) * cp];
#pragma unroll
        for (int j = 0; j < V; ++j) {
          float f = load(v.v[j]);
          if constexpr (Affine) {
            const float a = apply_affine(f, ab[j]);
            f = load(store<T>(relu ? fmaxf(a, 0.f) : a));
          }
          if (where[j] < 0 || f > best[j]) best[j] = f, where[j] = here;  // the first maximum wins
        }
      }
    }
    P out;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      out.v[j] = store<T>(best[j]);
      if (Affine && relu && !(best[j] > 0.f)) where[j] = -1;
    }
    reinterpret_cast<P*>(y)[idx] = out;
    int4* am = reinterpret_cast<int4*>(argmax + idx * V);
#pragma unroll
    for (int j = 0; j < V; j += 4) am[j / 4] = make_int4(where[j], where[j + 1], where[j + 2], where[j + 3]);
  }
}

template <typename T, int V>
__global__ void max_bwd_packs(PoolShape s, int ho, int wo, size_t total, const T* __restrict__ dy,
                              const int32_t* __restrict__ argmax, T* __restrict__ dx) {
  using P = Pack<T, V>;
  const int cp = s.c / V;
  CONVOY_GRID_STRIDE_AS(size_t, idx, total) {
    const int p = int(idx % cp);
    size_t pix = idx / cp;
    const int ix = int(pix % s.w_in);
    pix /= s.w_in;
    const int iy = int(pix % s.h_in);
    const size_t n = pix / s.h_in;
    const int here = iy * s.w_in + ix;
    int y0, y1, x0, x1;
    covering(iy, s.pad, s.kh, s.stride, ho, &y0, &y1);
    covering(ix, s.pad, s.kw, s.stride, wo, &x0, &x1);
    float sum[V] = {};
    for (int oy = y0; oy <= y1; ++oy)
      for (int ox = x0; ox <= x1; ++ox) {
        const size_t o = (n * ho * wo + size_t(oy * wo + ox)) * cp + p;
        const int4* am = reinterpret_cast<const int4*>(argmax + o * V);
        int32_t a[V];
#pragma unroll
        for (int j = 0; j < V; j += 4) {
          const int4 q = am[j / 4];
          a[j] = q.x, a[j + 1] = q.y, a[j + 2] = q.z, a[j + 3] = q.w;
        }
        bool any = false;
#pragma unroll
        for (int j = 0; j < V; ++j) any |= a[j] == here;
        if (!any) continue;
        const P g = reinterpret_cast<const P*>(dy)[o];
#pragma unroll
        for (int j = 0; j < V; ++j)
          if (a[j] == here) sum[j] += load(g.v[j]);
      }
    P out;
#pragma unroll
    for (int j = 0; j < V; ++j) out.v[j] = store<T>(sum[j]);
    reinterpret_cast<P*>(dx)[idx] = out;
  }
}

// The packed backward pass for windows of at most 3 at stride 2 (ResNet's 3x3/2 max pooling): one
// thread per 2x2 block of input pixels and pack, whose gradients come from at most 2x2 outputs
// (a window of k <= s + 1 at stride s spans two outputs at most). It loads those outputs' argmax
// and gradient once, all at once, for four inputs, where max_bwd_packs loads them per input and
// the gradient only after its argmax matched: its dependent loads, not its bytes, held it. The
// same sums in the same order as max_bwd_packs.
template <typename T, int V>
__global__ void max_bwd_blocks(PoolShape s, int ho, int wo, unsigned total, const T* __restrict__ dy,
                               const int32_t* __restrict__ argmax, T* __restrict__ dx) {
  using P = Pack<T, V>;
  const int cp = s.c / V, bh = (s.h_in + 1) / 2, bw = (s.w_in + 1) / 2;
  CONVOY_GRID_STRIDE_AS(unsigned, idx, total) {
    const int p = int(idx % cp);
    unsigned r = idx / cp;
    const int bx = int(r % bw);
    r /= bw;
    const int by = int(r % bh);
    const size_t n = r / bh;
    int y0, y1, x0, x1, unused;
    covering(2 * by, s.pad, s.kh, 2, ho, &y0, &unused);
    covering(min(2 * by + 1, s.h_in - 1), s.pad, s.kh, 2, ho, &unused, &y1);
    covering(2 * bx, s.pad, s.kw, 2, wo, &x0, &unused);
    covering(min(2 * bx + 1, s.w_in - 1), s.pad, s.kw, 2, wo, &unused, &x1);
    P g[2][2];
    int32_t a[2][2][V];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const bool there = y0 + i <= y1 && x0 + j <= x1;
        const size_t o = there ? ((n * ho + y0 + i) * wo + x0 + j) * cp + p : 0;
        const int4* am = reinterpret_cast<const int4*>(argmax + o * V);
#pragma unroll
        for (int q = 0; q < V; q += 4) {
          const int4 m = there ? am[q / 4] : make_int4(-1, -1, -1, -1);
          a[i][j][q] = m.x, a[i][j][q + 1] = m.y, a[i][j][q + 2] = m.z, a[i][j][q + 3] = m.w;
        }
        if (there) g[i][j] = reinterpret_cast<const P*>(dy)[o];
      }
#pragma unroll
    for (int u = 0; u < 2; ++u)
#pragma unroll
      for (int v = 0; v < 2; ++v) {
        const int iy = 2 * by + u, ix = 2 * bx + v, here = iy * s.w_in + ix;
        if (iy >= s.h_in || ix >= s.w_in) continue;
        float sum[V] = {};
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
          for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int q = 0; q < V; ++q)
              if (a[i][j][q] == here) sum[q] += load(g[i][j].v[q]);
        P out;
#pragma unroll
        for (int q = 0; q < V; ++q) out.v[q] = store<T>(sum[q]);
        reinterpret_cast<P*>(dx)[((n * s.h_in + iy) * s.w_in + ix) * cp + p] = out;
      }
  }
}

// Whether the packed NHWC kernels apply: whole packs per pixel, aligned pointers.
template <typename T, typename... Ptr>
bool packed_nhwc(Layout layout, const PoolShape& s, const Ptr*... p) {
  constexpr int V = kPack<T>;
  return layout == Layout::nhwc && s.c % V == 0 && pack_aligned<T, V>(p...);
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

// NHWC in 16-byte packs of V channels (cp per pixel): dx[n, pixel, :] = dy[n, :] / hw. One element
// a thread, with a division for its channel, took ResNet-50's pass 78 us on the H200 for 51 MB.
template <typename T, int V>
__global__ void gap_bwd_packs(int cp, int hw, size_t packs, const T* __restrict__ dy, T* __restrict__ dx) {
  using P = Pack<T, V>;
  CONVOY_GRID_STRIDE(k, packs) {
    const size_t sample = k / (size_t(hw) * cp);
    const P g = reinterpret_cast<const P*>(dy)[sample * cp + k % cp];
    P out;
#pragma unroll
    for (int j = 0; j < V; ++j) out.v[j] = store<T>(load(g.v[j]) / float(hw));
    reinterpret_cast<P*>(dx)[k] = out;
  }
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
  constexpr int V = kPack<T>;
  if (packed_nhwc<T>(layout, s, x, y) && reinterpret_cast<uintptr_t>(argmax) % 16 == 0) {
    const size_t packs = s.out_count() / V;
    max_fwd_packs<T, V><<<grid_for(packs), 256, 0, ctx.stream()>>>(s, s.h_out(), s.w_out(), packs, x, y, argmax);
    CONVOY_CUDA_CHECK_LAUNCH();
    return;
  }
  with_layout(layout, s.out_count(), [&](auto l, auto index) {
    max_fwd<T, decltype(l)::value><<<grid_for(s.out_count()), 256, 0, ctx.stream()>>>(
        s, s.h_out(), s.w_out(), decltype(index)(s.out_count()), x, y, argmax);
  });
  CONVOY_CUDA_CHECK_LAUNCH();
}

void max_pool_forward(Context& ctx, const PoolShape& s, const ChannelAffine& x, bf16* y, int32_t* argmax) {
  constexpr int V = kPack<bf16>;
  if (!max_pool_takes_affine(s) || !pack_aligned<bf16, V>(x.x, y) || reinterpret_cast<uintptr_t>(argmax) % 16 != 0)
    fail("max pooling of a deferred batch norm needs whole, aligned 16-byte packs of channels");
  const size_t packs = s.out_count() / V;
  max_fwd_packs<bf16, V, true><<<grid_for(packs), 256, 0, ctx.stream()>>>(s, s.h_out(), s.w_out(), packs, x.x, y,
                                                                          argmax, x.scale_shift, x.relu);
  CONVOY_CUDA_CHECK_LAUNCH();
}

template <typename T>
void max_pool_backward(Context& ctx, const PoolShape& s, const T* dy, const int32_t* argmax, T* dx, Layout layout) {
  constexpr int V = kPack<T>;
  if (packed_nhwc<T>(layout, s, dy, dx) && reinterpret_cast<uintptr_t>(argmax) % 16 == 0) {
    const size_t packs = s.in_count() / V;
    const size_t blocks = size_t(s.n) * ((s.h_in + 1) / 2) * ((s.w_in + 1) / 2) * (s.c / V);
    if (s.stride == 2 && s.kh <= 3 && s.kw <= 3 && blocks < (size_t(1) << 31)) {
      max_bwd_blocks<T, V>
          <<<grid_for(blocks), 256, 0, ctx.stream()>>>(s, s.h_out(), s.w_out(), unsigned(blocks), dy, argmax, dx);
      CONVOY_CUDA_CHECK_LAUNCH();
      return;
    }
    max_bwd_packs<T, V><<<grid_for(packs), 256, 0, ctx.stream()>>>(s, s.h_out(), s.w_out(), packs, dy, argmax, dx);
    CONVOY_CUDA_CHECK_LAUNCH();
    return;
  }
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
  constexpr int V = kPack<T>;
  if (layout == Layout::nhwc && c % V == 0 && pack_aligned<T, V>(dy, dx)) {
    gap_bwd_packs<T, V><<<grid_for(total / V), 256, 0, ctx.stream()>>>(c / V, hw, total / V, dy, dx);
    CONVOY_CUDA_CHECK_LAUNCH();
    return;
  }
  with_layout(layout, total, [&](auto l, auto index) {
    gap_bwd<T, decltype(l)::value><<<grid_for(total), 256, 0, ctx.stream()>>>(c, hw, decltype(index)(total), dy, dx);
  });
  CONVOY_CUDA_CHECK_LAUNCH();
}

#define CONVOY_POOL_INSTANTIATE(T)                                                                      \
  template void max_pool_forward<T>(Context&, const PoolShape&, const T*, T*, int32_t*, Layout);        \
  template void max_pool_backward<T>(Context&, const PoolShape&, const T*, const int32_t*, T*, Layout); \
  template void avg_pool_forward<T>(Context&, const PoolShape&, const T*, T*, Layout);                  \
  template void avg_pool_backward<T>(Context&, const PoolShape&, const T*, T*, Layout);                 \
  template void global_avg_pool_forward<T>(Context&, int, int, int, const T*, T*, Layout);              \
  template void global_avg_pool_backward<T>(Context&, int, int, int, const T*, T*, Layout);
CONVOY_POOL_INSTANTIATE(float)
CONVOY_POOL_INSTANTIATE(bf16)

}  // namespace convoy::gpu

namespace convoy {
namespace {

using gpu::as;
using gpu::bf16;
using gpu::GpuLayer;

template <typename T>
void max_forward(const GpuLayer& l) {
  if constexpr (std::is_same_v<T, bf16>) {
    if (l.affine[0].scale_shift) {
      gpu::max_pool_forward(l.ctx, pool_shape(l.node, l.n()), l.affine[0], as<T>(l.buf.y), as<int32_t>(l.buf.aux));
      return;
    }
  }
  gpu::max_pool_forward(l.ctx, pool_shape(l.node, l.n()), l.xs<T>(), as<T>(l.buf.y), as<int32_t>(l.buf.aux),
                        l.layout());
}

template <typename T>
void max_backward(const GpuLayer& l) {
  if (!l.dx) return;
  gpu::max_pool_backward(l.ctx, pool_shape(l.node, l.n()), as<T>(l.buf.dy), as<int32_t>(l.buf.aux), l.grad_to<T>(),
                         l.layout());
}

template <typename T>
void avg_forward(const GpuLayer& l) {
  gpu::avg_pool_forward(l.ctx, pool_shape(l.node, l.n()), l.xs<T>(), as<T>(l.buf.y), l.layout());
}

template <typename T>
void avg_backward(const GpuLayer& l) {
  if (l.dx) gpu::avg_pool_backward(l.ctx, pool_shape(l.node, l.n()), as<T>(l.buf.dy), l.grad_to<T>(), l.layout());
}

template <typename T>
void global_forward(const GpuLayer& l) {
  gpu::global_avg_pool_forward(l.ctx, l.n(), l.in().c, l.in().h * l.in().w, l.xs<T>(), as<T>(l.buf.y), l.layout());
}

template <typename T>
void global_backward(const GpuLayer& l) {
  if (!l.dx) return;
  gpu::global_avg_pool_backward(l.ctx, l.n(), l.in().c, l.in().h * l.in().w, as<T>(l.buf.dy), l.grad_to<T>(),
                                l.layout());
}

}  // namespace

void MaxPoolOp::gpu_setup(gpu::GpuSetup& s) const { s.arena.request(s.buf.aux, s.count() * sizeof(int32_t)); }
void MaxPoolOp::gpu_forward(const GpuLayer& l) const { l.half ? max_forward<bf16>(l) : max_forward<float>(l); }
void MaxPoolOp::gpu_backward(const GpuLayer& l, int) const { l.half ? max_backward<bf16>(l) : max_backward<float>(l); }

void AvgPoolOp::gpu_forward(const GpuLayer& l) const { l.half ? avg_forward<bf16>(l) : avg_forward<float>(l); }
void AvgPoolOp::gpu_backward(const GpuLayer& l, int) const { l.half ? avg_backward<bf16>(l) : avg_backward<float>(l); }

void GlobalAvgPoolOp::gpu_forward(const GpuLayer& l) const {
  l.half ? global_forward<bf16>(l) : global_forward<float>(l);
}
void GlobalAvgPoolOp::gpu_backward(const GpuLayer& l, int) const {
  l.half ? global_backward<bf16>(l) : global_backward<float>(l);
}

}  // namespace convoy
