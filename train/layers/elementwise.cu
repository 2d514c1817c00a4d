// CUDA twin of elementwise.cpp: ReLU, residual add (alone or with the ReLU after it) and gradient
// accumulation, for fp32 or bf16 elements (fp32 arithmetic either way; ReLU is exact in both), in
// 16-byte packs where the pointers allow; then the relu and add ops' passes.
#include <type_traits>

#include "train/cuda/channels.cuh"
#include "train/cuda/elementwise_map.cuh"
#include "train/cuda/gpu_context.h"
#include "train/cuda/storage.cuh"
#include "train/layers/elementwise.h"
#include "train/layers/gpu_layer.h"

namespace convoy::gpu {
namespace {

using elementwise::launch;

struct Relu {
  __device__ float operator()(float x, float) const { return x > 0.f ? x : 0.f; }
};
struct ReluGrad {  // (y, dy)
  __device__ float operator()(float y, float dy) const { return y > 0.f ? dy : 0.f; }
};
struct Sum {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct SumRelu {
  __device__ float operator()(float a, float b) const { return fmaxf(a + b, 0.f); }
};

// The gradient below a ReLU from the gradient of its output, g (and h, where it came in two parts:
// g + h, rounded once), and the output's signs, keep (bit j: element j > 0).
template <typename T, int V>
__device__ __forceinline__ Pack<T, V> relu_input_grad(Pack<T, V> g, const Pack<T, V>* h, unsigned keep) {
#pragma unroll
  for (int j = 0; j < V; ++j) {
    if (h) g.v[j] = store<T>(load(g.v[j]) + load(h->v[j]));
    if (!(keep >> j & 1u)) g.v[j] = store<T>(0.f);
  }
  return g;
}

// The gradient below a ReLU (y its output), g = y > 0 ? dy : 0, sent to two places at once (an
// add's two inputs): each d is written, or with acc added to (d += g, as accumulate()); a null d
// takes nothing. With dy2, the ReLU's gradient came in two parts, dy + dy2, rounded once. With
// bits (whole packs only), the ReLU's output signs are read there instead of from y.
template <typename T, int V>
__global__ void relu_grad_pair(size_t n, const T* __restrict__ y, const uint8_t* __restrict__ bits,
                               const T* __restrict__ dy, const T* __restrict__ dy2, T* d0, bool acc0, T* d1,
                               bool acc1) {
  using P = Pack<T, V>;
  const size_t packs = n / V;
  auto put = [](T* d, bool acc, size_t k, const P& g) {
    if (!d) return;
    P out = g;
    if (acc) {
      const P old = reinterpret_cast<const P*>(d)[k];
#pragma unroll
      for (int j = 0; j < V; ++j) out.v[j] = store<T>(load(old.v[j]) + load(g.v[j]));
    }
    reinterpret_cast<P*>(d)[k] = out;
  };
  CONVOY_GRID_STRIDE(k, packs) {
    const unsigned keep = relu_signs<T, V>(bits, y, k);
    P h;
    if (dy2) h = reinterpret_cast<const P*>(dy2)[k];
    const P g = relu_input_grad(reinterpret_cast<const P*>(dy)[k], dy2 ? &h : nullptr, keep);
    put(d0, acc0, k, g);
    put(d1, acc1, k, g);
  }
  const size_t t = packs * V + blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (t < n) {
    const float g = load(y[t]) > 0.f ? load(store<T>(load(dy[t]) + (dy2 ? load(dy2[t]) : 0.f))) : 0.f;
    if (d0) d0[t] = store<T>(acc0 ? load(d0[t]) + g : g);
    if (d1) d1[t] = store<T>(acc1 ? load(d1[t]) + g : g);
  }
}

// add_relu_backward_sums' pass: g as relu_grad_pair makes it, written once, to d; and the gradient
// sums of S deferred batch norms that g reaches, taken as g is made, in channels.cuh's pack-wise
// partials (a thread keeps to one channel pack across rows), the same bits as batch norm's
// GradTerms summing g afterwards.
template <int V, int S>
__global__ void relu_grad_sums(long long rows, int cp, const bf16* __restrict__ y, const uint8_t* __restrict__ bits,
                               const bf16* __restrict__ dy, const bf16* __restrict__ dy2, bf16* __restrict__ d,
                               BnGradSums b0, BnGradSums b1) {
  using P = Pack<bf16, V>;
  const BnGradSums bn[2] = {b0, b1};
  const int p = blockIdx.x * channels::kTilePacks + threadIdx.x;
  const channels::PackRows rows_of = channels::pack_rows(rows);
  // The batch norms' means and inverse deviations are read from shared memory at each use
  // (volatile, so that they are not hoisted back into registers): held in registers, with two rows'
  // loads in flight, they left room for two blocks per SM, one with two batch norms, and the pass
  // moved 2.2-3.3 TB/s on the H200.
  __shared__ float2 stats[S][channels::kTilePacks][V + 1];
#pragma unroll
  for (int k = 0; k < S; ++k) channels::stage_channel_pairs<V>(stats[k], cp, bn[k].mean, bn[k].invstd);
  __syncthreads();
  const volatile float2(&mi)[S][channels::kTilePacks][V + 1] = stats;
  float2 s[S][V];
#pragma unroll
  for (int k = 0; k < S; ++k)
#pragma unroll
    for (int j = 0; j < V; ++j) s[k][j] = make_float2(0.f, 0.f);
  if (p < cp) {
    for (long long r = rows_of.first; r < rows_of.end; r += channels::kPackLanes) {
      const size_t at = size_t(r) * cp + p;
      const unsigned keep = relu_signs<bf16, V>(bits, y, at);
      P h, px[S];
      if (dy2) h = reinterpret_cast<const P*>(dy2)[at];
#pragma unroll
      for (int k = 0; k < S; ++k) px[k] = reinterpret_cast<const P*>(bn[k].x)[at];
      const P g = relu_input_grad(reinterpret_cast<const P*>(dy)[at], dy2 ? &h : nullptr, keep);
      reinterpret_cast<P*>(d)[at] = g;
#pragma unroll
      for (int k = 0; k < S; ++k)
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float gj = load(g.v[j]);
          s[k][j].x += gj;
          s[k][j].y += bn_grad_term(gj, load(px[k].v[j]), mi[k][threadIdx.x][j].x, mi[k][threadIdx.x][j].y);
        }
    }
  }
  float2* const out[2] = {b0.part, b1.part};
  channels::store_pack_partials<V, S>(s, cp, out);
}

// An input's value as its maker would have stored it: x, or x * scale + shift rounded to bf16.
template <bool Affine>
__device__ __forceinline__ float affine_value(bf16 x, float2 ab) {
  if constexpr (Affine) return load(store<bf16>(apply_affine(load(x), ab)));
  return load(x);
}

// y = a + b (Relu: max(0, a + b), its signs in bits where given), A and B saying which inputs are
// left as a ChannelAffine; a thread keeps to one channel pack, its scales and shifts loaded once.
template <int V, bool A, bool B, bool Relu>
__global__ void add_affine(size_t packs, int c, ChannelAffine a, ChannelAffine b, bf16* __restrict__ y,
                           uint8_t* __restrict__ bits) {
  using P = Pack<bf16, V>;
  float2 sa[V], sb[V];
  channels::for_each_in_channel_pack(
      packs, c / V,
      [&](int cp) {
#pragma unroll
        for (int j = 0; j < V; ++j) {
          sa[j] = A ? a.scale_shift[cp * V + j] : float2{};
          sb[j] = B ? b.scale_shift[cp * V + j] : float2{};
        }
      },
      [&](size_t k) {
        const P pa = reinterpret_cast<const P*>(a.x)[k], pb = reinterpret_cast<const P*>(b.x)[k];
        P out;
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float v = affine_value<A>(pa.v[j], sa[j]) + affine_value<B>(pb.v[j], sb[j]);
          out.v[j] = store<bf16>(Relu ? fmaxf(v, 0.f) : v);
        }
        reinterpret_cast<P*>(y)[k] = out;
        if (Relu && bits) bits[k] = uint8_t(positive_bits(out));
      });
}

template <int V, bool A, bool B>
void launch_add_affine(Context& ctx, size_t count, int c, const ChannelAffine& a, const ChannelAffine& b, bf16* y,
                       bool relu, uint8_t* bits) {
  if (relu)
    add_affine<V, A, B, true>
        <<<channels::grid_for_rows<add_affine<V, A, B, true>>(count / V, c / V), 256, 0, ctx.stream()>>>(count / V, c,
                                                                                                         a, b, y, bits);
  else
    add_affine<V, A, B, false>
        <<<channels::grid_for_rows<add_affine<V, A, B, false>>(count / V, c / V), 256, 0, ctx.stream()>>>(
            count / V, c, a, b, y, nullptr);
}

}  // namespace

void add_affine_forward(Context& ctx, size_t count, int c, const ChannelAffine& a, const ChannelAffine& b, bf16* y,
                        bool relu, uint8_t* relu_bits) {
  channels::with_pack<bf16>(
      c,
      [&](auto v) {
        constexpr int V = decltype(v)::value;
        if (relu_bits && V == 1) fail("add_affine_forward: a ReLU's signs as bits need whole 16-byte channel packs");
        if (!a.scale_shift && !b.scale_shift)
          launch_add_affine<V, false, false>(ctx, count, c, a, b, y, relu, relu_bits);
        else if (!b.scale_shift)
          launch_add_affine<V, true, false>(ctx, count, c, a, b, y, relu, relu_bits);
        else if (!a.scale_shift)
          launch_add_affine<V, false, true>(ctx, count, c, a, b, y, relu, relu_bits);
        else
          launch_add_affine<V, true, true>(ctx, count, c, a, b, y, relu, relu_bits);
      },
      a.x, b.x, y);
  CONVOY_CUDA_CHECK_LAUNCH();
}

template <typename T>
void relu_forward(Context& ctx, size_t count, const T* x, T* y) {
  launch(ctx, count, Relu{}, x, x, y);
}
template <typename T>
void relu_backward(Context& ctx, size_t count, const T* y, const T* dy, T* dx) {
  launch(ctx, count, ReluGrad{}, y, dy, dx);
}
template <typename T>
void add_forward(Context& ctx, size_t count, const T* a, const T* b, T* y) {
  launch(ctx, count, Sum{}, a, b, y);
}
template <typename T>
void accumulate(Context& ctx, size_t count, const T* src, T* dst) {
  launch(ctx, count, Sum{}, const_cast<const T*>(dst), src, dst);
}
template <typename T>
void add_relu_forward(Context& ctx, size_t count, const T* a, const T* b, T* y) {
  launch(ctx, count, SumRelu{}, a, b, y);
}
template <typename T>
void add_relu_backward(Context& ctx, size_t count, const T* y, const T* dy, T* da, bool acc_a, T* db, bool acc_b,
                       const T* dy2, const uint8_t* relu_bits) {
  constexpr int V = kPack<T>;
  const T* d0 = da ? da : y;  // a null destination or second part does not affect the alignment
  const T* d1 = db ? db : y;
  const bool packs = pack_aligned<T, V>(y, dy, d0, d1, dy2 ? dy2 : y);
  if (relu_bits && (!packs || count % V != 0))
    fail("add_relu_backward: a ReLU's signs as bits need whole 16-byte packs");
  if (packs)
    relu_grad_pair<T, V>
        <<<grid_for(count / V), 256, 0, ctx.stream()>>>(count, y, relu_bits, dy, dy2, da, acc_a, db, acc_b);
  else
    relu_grad_pair<T, 1><<<grid_for(count), 256, 0, ctx.stream()>>>(count, y, nullptr, dy, dy2, da, acc_a, db, acc_b);
  CONVOY_CUDA_CHECK_LAUNCH();
}

void add_relu_backward_sums(Context& ctx, long long rows, int c, const bf16* y, const bf16* dy, const bf16* dy2,
                            bf16* d, const BnGradSums& a, const BnGradSums& b, const uint8_t* relu_bits) {
  constexpr int V = kPack<bf16>;
  const BnGradSums& first = a.part ? a : b;
  const int sets = (a.part ? 1 : 0) + (b.part ? 1 : 0);
  if (sets == 0 || c % V != 0 || !pack_aligned<bf16, V>(y, dy, dy2 ? dy2 : y, d, first.x, b.part ? b.x : first.x))
    fail("add_relu_backward_sums: needs a batch norm's sums to take, whole 16-byte channel packs and aligned tensors");
  const dim3 grid = channels::pack_grid(rows, c / V), block = channels::pack_block();
  if (sets == 2)
    relu_grad_sums<V, 2><<<grid, block, 0, ctx.stream()>>>(rows, c / V, y, relu_bits, dy, dy2, d, a, b);
  else
    relu_grad_sums<V, 1><<<grid, block, 0, ctx.stream()>>>(rows, c / V, y, relu_bits, dy, dy2, d, first, BnGradSums{});
  CONVOY_CUDA_CHECK_LAUNCH();
}

#define CONVOY_ELEMENTWISE_INSTANTIATE(T)                                                                \
  template void relu_forward<T>(Context&, size_t, const T*, T*);                                         \
  template void relu_backward<T>(Context&, size_t, const T*, const T*, T*);                              \
  template void add_forward<T>(Context&, size_t, const T*, const T*, T*);                                \
  template void accumulate<T>(Context&, size_t, const T*, T*);                                           \
  template void add_relu_forward<T>(Context&, size_t, const T*, const T*, T*);                           \
  template void add_relu_backward<T>(Context&, size_t, const T*, const T*, T*, bool, T*, bool, const T*, \
                                     const uint8_t*);
CONVOY_ELEMENTWISE_INSTANTIATE(float)
CONVOY_ELEMENTWISE_INSTANTIATE(bf16)

}  // namespace convoy::gpu

namespace convoy {
namespace {

using gpu::as;
using gpu::bf16;
using gpu::GpuLayer;

template <typename T>
void relu_fwd(const GpuLayer& l) {
  gpu::relu_forward(l.ctx, l.count(), l.xs<T>(), as<T>(l.buf.y));
}

template <typename T>
void relu_bwd(const GpuLayer& l) {
  if (l.dx) gpu::relu_backward(l.ctx, l.count(), as<T>(l.buf.y), as<T>(l.buf.dy), l.grad_to<T>());
}

// With the ReLU after it (bf16), its output is the ReLU's (and its signs, where GpuNet keeps them);
// inputs left as scale and shift (bf16) are applied as they are read.
template <typename T>
void add_fwd(const GpuLayer& l) {
  if constexpr (std::is_same_v<T, bf16>) {
    uint8_t* bits = l.relu ? l.relu_bits : nullptr;
    if (l.affine[0].scale_shift || l.affine[1].scale_shift || bits) {
      const gpu::ChannelAffine a = l.affine[0].scale_shift ? l.affine[0] : gpu::ChannelAffine{l.xs<T>(0)};
      const gpu::ChannelAffine b = l.affine[1].scale_shift ? l.affine[1] : gpu::ChannelAffine{l.xs<T>(1)};
      gpu::add_affine_forward(l.ctx, l.count(), l.node.out.c, a, b, l.relu ? as<T>(l.relu->y) : as<T>(l.buf.y),
                              l.relu != nullptr, bits);
      return;
    }
  }
  if (l.relu)
    gpu::add_relu_forward(l.ctx, l.count(), l.xs<T>(0), l.xs<T>(1), as<T>(l.relu->y));
  else
    gpu::add_forward(l.ctx, l.count(), l.xs<T>(0), l.xs<T>(1), as<T>(l.buf.y));
}

template <typename T>
void add_bwd(const GpuLayer& l) {
  if (l.dx) gpu::device_copy(l.ctx, l.dx, l.buf.dy.get(), l.count() * sizeof(T));
}

}  // namespace

void ReluOp::gpu_forward(const GpuLayer& l) const { l.half ? relu_fwd<bf16>(l) : relu_fwd<float>(l); }
void ReluOp::gpu_backward(const GpuLayer& l, int) const { l.half ? relu_bwd<bf16>(l) : relu_bwd<float>(l); }

void AddOp::gpu_forward(const GpuLayer& l) const { l.half ? add_fwd<bf16>(l) : add_fwd<float>(l); }
void AddOp::gpu_backward(const GpuLayer& l, int) const { l.half ? add_bwd<bf16>(l) : add_bwd<float>(l); }

// With the ReLU after it (bf16 only), the ReLU's input gradient goes straight into both inputs'
// gradients (added where they have other consumers too), instead of a ReLU pass and two copies.
bool AddOp::gpu_backward_all(const GpuLayer& l) const {
  if (!l.relu) return false;
  if (l.grad_sums[0].part || l.grad_sums[1].part) {  // one gradient for both inputs, written once
    if ((l.x_grad[0] != nullptr) == (l.x_grad[1] != nullptr) || l.x_add[0] || l.x_add[1])
      fail("AddOp: taking batch norms' gradient sums needs exactly one input gradient to write whole");
    const int c = l.node.out.c;
    gpu::add_relu_backward_sums(l.ctx, (long long)(l.count() / c), c, as<bf16>(l.relu->y), as<bf16>(l.relu->dy),
                                static_cast<const bf16*>(l.relu_dy2),
                                static_cast<bf16*>(l.x_grad[0] ? l.x_grad[0] : l.x_grad[1]), l.grad_sums[0],
                                l.grad_sums[1], l.relu_bits);
    return true;
  }
  gpu::add_relu_backward(l.ctx, l.count(), as<bf16>(l.relu->y), as<bf16>(l.relu->dy), static_cast<bf16*>(l.x_grad[0]),
                         l.x_add[0], static_cast<bf16*>(l.x_grad[1]), l.x_add[1], static_cast<const bf16*>(l.relu_dy2),
                         l.relu_bits);
  return true;
}

}  // namespace convoy
