// Depthwise convolution kernels, bf16 NHWC with fp32 sums: each thread carries 8 channels (one
// 16-byte load a pixel), the weights read as fp32 [tap, c] from the workspace's start.
#include <algorithm>

#include "train/cuda/gpu_context.h"
#include "train/layers/depthwise_conv.h"

namespace convoy::gpu {
namespace {

constexpr int kVec = 8;      // channels a thread carries: 8 bf16 = 16 bytes
constexpr int kBlock = 256;  // threads a block
constexpr int kMaxFilterBlocks = 2048;
constexpr int kStrip = 4;  // neighbouring pixels of a row a thread computes

struct Dims {
  unsigned n, c8, h, w, ho, wo, stride, pad;
};

Dims dims_of(const ConvShape& s) {
  return Dims{unsigned(s.n),       unsigned(s.c_in / kVec), unsigned(s.h_in),   unsigned(s.w_in),
              unsigned(s.h_out()), unsigned(s.w_out()),     unsigned(s.stride), unsigned(s.pad)};
}

__device__ inline void unpack(const uint4& v, float* f) {
  const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 t = __bfloat1622float2(p[i]);
    f[2 * i] = t.x, f[2 * i + 1] = t.y;
  }
}

__device__ inline uint4 pack(const float* f) {
  uint4 v;
  __nv_bfloat162* p = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) p[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  return v;
}

// w [c, taps] bf16 to wt [taps, c] fp32.
__global__ void taps_by_channel(unsigned count, unsigned taps, unsigned c, const bf16* __restrict__ w,
                                float* __restrict__ wt) {
  CONVOY_GRID_STRIDE(j, count) wt[(j % taps) * c + j / taps] = __bfloat162float(w[j]);
}

// A block is `lanes` rows of c8 threads, one per group of 8 channels; a thread keeps its group's
// weights in registers and strides through the pixels with every other lane of the grid.
struct Lanes {
  unsigned lane, c8, stride;
};

__device__ inline Lanes lanes_of(const Dims& d) {
  const unsigned per_block = blockDim.x / d.c8;
  return Lanes{blockIdx.x * per_block + threadIdx.x / d.c8, threadIdx.x % d.c8, gridDim.x * per_block};
}

template <int K>
__device__ inline void load_taps(const float* __restrict__ wt, unsigned c, unsigned c8, float (&w)[K * K][kVec]) {
#pragma unroll
  for (int t = 0; t < K * K; ++t) {
    const float4 a = reinterpret_cast<const float4*>(wt + t * c + c8 * kVec)[0];
    const float4 b = reinterpret_cast<const float4*>(wt + t * c + c8 * kVec)[1];
    w[t][0] = a.x, w[t][1] = a.y, w[t][2] = a.z, w[t][3] = a.w, w[t][4] = b.x, w[t][5] = b.y, w[t][6] = b.z,
    w[t][7] = b.w;
  }
}

// acc += f * w, 8 channels.
__device__ inline void fma8(const float* f, const float* w, float* acc) {
#pragma unroll
  for (int q = 0; q < kVec; ++q) acc[q] += f[q] * w[q];
}

// A strip: kStrip neighbouring pixels of one row (the last of a row may run past its end), whose
// windows share their input columns: each column is loaded once for the strip.
struct Strip {
  unsigned n, row, col0;
};

__device__ inline Strip strip_at(unsigned k, unsigned rows, unsigned cols) {
  const unsigned per_row = (cols + kStrip - 1) / kStrip;
  return Strip{k / per_row / rows, k / per_row % rows, k % per_row * kStrip};
}

__host__ __device__ inline unsigned strips_of(unsigned n, unsigned rows, unsigned cols) {
  return n * rows * ((cols + kStrip - 1) / kStrip);
}

template <int K, int S>
__global__ void __launch_bounds__(kBlock)
    forward_kernel(Dims d, const uint4* __restrict__ x, const float* __restrict__ wt, uint4* __restrict__ y) {
  constexpr int kCols = (kStrip - 1) * S + K;  // input columns a strip reads
  const Lanes l = lanes_of(d);
  float w[K * K][kVec];
  load_taps<K>(wt, d.c8 * kVec, l.c8, w);
  for (unsigned k = l.lane; k < strips_of(d.n, d.ho, d.wo); k += l.stride) {
    const Strip st = strip_at(k, d.ho, d.wo);
    float acc[kStrip][kVec] = {};
#pragma unroll
    for (int i = 0; i < K; ++i) {
      const int ih = int(st.row * S + i) - int(d.pad);
      if (ih < 0 || ih >= int(d.h)) continue;
      const uint4* row = x + (size_t(st.n) * d.h + ih) * d.w * d.c8 + l.c8;
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        const int iw = int(st.col0 * S + j) - int(d.pad);
        if (iw < 0 || iw >= int(d.w)) continue;
        float v[kVec];
        unpack(row[size_t(iw) * d.c8], v);
#pragma unroll
        for (int q = 0; q < kStrip; ++q)
          if (j - q * S >= 0 && j - q * S < K) fma8(v, w[i * K + j - q * S], acc[q]);
      }
    }
    uint4* out = y + ((size_t(st.n) * d.ho + st.row) * d.wo + st.col0) * d.c8 + l.c8;
#pragma unroll
    for (int q = 0; q < kStrip; ++q)
      if (st.col0 + q < d.wo) out[size_t(q) * d.c8] = pack(acc[q]);
  }
}

// dx (or dx + the input gradient, with add) for the first `valid` pixels of a strip.
__device__ inline void store_dx(uint4* at, unsigned c8, unsigned valid, float (&acc)[kStrip][kVec], bool add) {
#pragma unroll
  for (int q = 0; q < kStrip; ++q) {
    if (unsigned(q) >= valid) continue;
    if (add) {
      float old[kVec];
      unpack(at[size_t(q) * c8], old);
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc[q][e] += old[e];
    }
    at[size_t(q) * c8] = pack(acc[q]);
  }
}

// Stride 1: a strip of input pixels gathers the output columns whose windows hold them, each loaded
// once (output column j of the strip's span meets input pixel q through tap q + K - 1 - j).
template <int K>
__global__ void __launch_bounds__(kBlock)
    backward_data_s1_kernel(Dims d, const uint4* __restrict__ dy, const float* __restrict__ wt, uint4* __restrict__ dx,
                            bool add) {
  constexpr int kCols = kStrip + K - 1;
  const Lanes l = lanes_of(d);
  float w[K * K][kVec];
  load_taps<K>(wt, d.c8 * kVec, l.c8, w);
  for (unsigned k = l.lane; k < strips_of(d.n, d.h, d.w); k += l.stride) {
    const Strip st = strip_at(k, d.h, d.w);
    float acc[kStrip][kVec] = {};
#pragma unroll
    for (int i = 0; i < K; ++i) {
      const int oh = int(st.row + d.pad) - i;
      if (oh < 0 || oh >= int(d.ho)) continue;
      const uint4* row = dy + (size_t(st.n) * d.ho + oh) * d.wo * d.c8 + l.c8;
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        const int ow = int(st.col0 + d.pad) - (K - 1) + j;
        if (ow < 0 || ow >= int(d.wo)) continue;
        float v[kVec];
        unpack(row[size_t(ow) * d.c8], v);
#pragma unroll
        for (int q = 0; q < kStrip; ++q)
          if (q + K - 1 - j >= 0 && q + K - 1 - j < K) fma8(v, w[i * K + q + K - 1 - j], acc[q]);
      }
    }
    store_dx(dx + ((size_t(st.n) * d.h + st.row) * d.w + st.col0) * d.c8 + l.c8, d.c8, min(kStrip, d.w - st.col0), acc,
             add);
  }
}

// Stride 2: each input pixel gathers the output pixels whose windows hold it.
template <int K>
__global__ void __launch_bounds__(kBlock)
    backward_data_s2_kernel(Dims d, const uint4* __restrict__ dy, const float* __restrict__ wt, uint4* __restrict__ dx,
                            bool add) {
  const Lanes l = lanes_of(d);
  float w[K * K][kVec];
  load_taps<K>(wt, d.c8 * kVec, l.c8, w);
  const unsigned pixels = d.n * d.h * d.w;
  for (unsigned p = l.lane; p < pixels; p += l.stride) {
    const unsigned iw = p % d.w, ih = p / d.w % d.h, n = p / d.w / d.h;
    float acc[kStrip][kVec] = {};
#pragma unroll
    for (int i = 0; i < K; ++i) {
      const int t = int(ih + d.pad) - i;
      if (t < 0 || t % 2 || t / 2 >= int(d.ho)) continue;
#pragma unroll
      for (int j = 0; j < K; ++j) {
        const int u = int(iw + d.pad) - j;
        if (u < 0 || u % 2 || u / 2 >= int(d.wo)) continue;
        float v[kVec];
        unpack(dy[((size_t(n) * d.ho + t / 2) * d.wo + u / 2) * d.c8 + l.c8], v);
        fma8(v, w[i * K + j], acc[0]);
      }
    }
    store_dx(dx + size_t(p) * d.c8 + l.c8, d.c8, 1, acc, add);
  }
}

// First pass of the filter gradient: block b sums its contiguous run of output strips into
// partial[b, tap, c]. A thread holds one group of 8 channels and strides through the run with the
// block's other lanes of that group, each input column of a strip loaded once; the lanes are then
// summed in lane order through shared memory, one tap at a time.
template <int K, int S>
__global__ void __launch_bounds__(kBlock)
    filter_partial_kernel(Dims d, unsigned run, const uint4* __restrict__ x, const uint4* __restrict__ dy,
                          float* __restrict__ partial) {
  constexpr int kCols = (kStrip - 1) * S + K;
  __shared__ float lane_sums[kBlock * kVec];
  const unsigned c = d.c8 * kVec, lanes = blockDim.x / d.c8, lane = threadIdx.x / d.c8, c8 = threadIdx.x % d.c8;
  const unsigned first = blockIdx.x * run, last = min(first + run, strips_of(d.n, d.ho, d.wo));
  float acc[K * K][kVec] = {};
  for (unsigned k = first + lane; k < last; k += lanes) {
    const Strip st = strip_at(k, d.ho, d.wo);
    const uint4* grow = dy + ((size_t(st.n) * d.ho + st.row) * d.wo + st.col0) * d.c8 + c8;
    float g[kStrip][kVec] = {};
#pragma unroll
    for (int q = 0; q < kStrip; ++q)
      if (st.col0 + q < d.wo) unpack(grow[size_t(q) * d.c8], g[q]);
#pragma unroll
    for (int i = 0; i < K; ++i) {
      const int ih = int(st.row * S + i) - int(d.pad);
      if (ih < 0 || ih >= int(d.h)) continue;
      const uint4* row = x + (size_t(st.n) * d.h + ih) * d.w * d.c8 + c8;
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        const int iw = int(st.col0 * S + j) - int(d.pad);
        if (iw < 0 || iw >= int(d.w)) continue;
        float v[kVec];
        unpack(row[size_t(iw) * d.c8], v);
#pragma unroll
        for (int q = 0; q < kStrip; ++q)
          if (j - q * S >= 0 && j - q * S < K)
#pragma unroll
            for (int e = 0; e < kVec; ++e) acc[i * K + j - q * S][e] += g[q][e] * v[e];
      }
    }
  }
#pragma unroll
  for (int t = 0; t < K * K; ++t) {
#pragma unroll
    for (int q = 0; q < kVec; ++q) lane_sums[threadIdx.x * kVec + q] = acc[t][q];
    __syncthreads();
    for (unsigned ch = threadIdx.x; ch < c; ch += blockDim.x) {
      float sum = 0;
      for (unsigned l = 0; l < lanes; ++l) sum += lane_sums[l * c + ch];
      partial[(size_t(blockIdx.x) * K * K + t) * c + ch] = sum;
    }
    __syncthreads();
  }
}

// Second pass: dw[ch, tap] = the blocks' partial sums, a warp per weight: lane l sums blocks l,
// l + 32, ... in order, then the lanes' sums meet in a fixed tree (the same bits on every run).
__global__ void filter_sum_kernel(unsigned blocks, unsigned taps, unsigned c, const float* __restrict__ partial,
                                  float* __restrict__ dw) {
  const unsigned lane = threadIdx.x % 32;
  const size_t warps = size_t(gridDim.x) * blockDim.x / 32;
  for (size_t k = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; k < size_t(c) * taps; k += warps) {
    const unsigned ch = unsigned(k % c), t = unsigned(k / c);
    float sum = 0;
    for (unsigned b = lane; b < blocks; b += 32) sum += partial[(size_t(b) * taps + t) * c + ch];
#pragma unroll
    for (int off = 16; off > 0; off /= 2) sum += __shfl_down_sync(0xffffffffu, sum, off);
    if (lane == 0) dw[size_t(ch) * taps + t] = sum;
  }
}

size_t taps_bytes(const ConvShape& s) { return (size_t(s.kh) * s.kw * s.c_in * sizeof(float) + 255) / 256 * 256; }

// The weights as fp32 [tap, c] at the workspace's start.
const float* weights_by_tap(Context& ctx, const ConvShape& s, const bf16* w) {
  float* wt = static_cast<float*>(ctx.workspace());
  const size_t count = size_t(s.c_in) * s.kh * s.kw;
  taps_by_channel<<<grid_for(count), kBlock, 0, ctx.stream()>>>(unsigned(count), unsigned(s.kh * s.kw),
                                                                unsigned(s.c_in), w, wt);
  CONVOY_CUDA_CHECK_LAUNCH();
  return wt;
}

// Threads a block: whole rows of c8 threads.
unsigned block_threads(const Dims& d) { return kBlock / d.c8 * d.c8; }

// Blocks for a pass over `items` (strips or pixels), about 8 a thread (the weights are loaded once
// a thread).
unsigned pass_blocks(const Dims& d, size_t items) {
  const size_t lanes = kBlock / d.c8, want = (items + lanes * 8 - 1) / (lanes * 8);
  return unsigned(std::clamp<size_t>(want, 1, 65535));
}

using I1 = std::integral_constant<int, 1>;
using I2 = std::integral_constant<int, 2>;
using I3 = std::integral_constant<int, 3>;
using I5 = std::integral_constant<int, 5>;

// Runs f's instantiation for the shape's kernel size and stride (3x3 or 5x5, stride 1 or 2: what
// plan_depthwise admits).
template <typename F>
void by_shape(const ConvShape& s, F f) {
  if (s.kh == 3)
    s.stride == 1 ? f(I3{}, I1{}) : f(I3{}, I2{});
  else
    s.stride == 1 ? f(I5{}, I1{}) : f(I5{}, I2{});
}

}  // namespace

DepthwisePlan plan_depthwise(const ConvShape& s, size_t workspace_bytes) {
  DepthwisePlan p;
  const bool shape_ok = s.groups == s.c_in && s.c_out == s.c_in && s.c_in % kVec == 0 && s.c_in / kVec <= kBlock &&
                        s.kh == s.kw && (s.kh == 3 || s.kh == 5) && (s.stride == 1 || s.stride == 2) && !s.relu;
  if (!shape_ok) return p;
  const size_t pixels = size_t(std::max(s.h_in, s.h_out())) * std::max(s.w_in, s.w_out()) * s.n;
  const size_t per_block = size_t(s.kh) * s.kw * s.c_in * sizeof(float);
  if (workspace_bytes < taps_bytes(s) + per_block) return p;
  // A fixed split, from the shape alone (about 16 output strips a thread, at most 2048 blocks): the
  // same sums on any GPU.
  const size_t fit = (workspace_bytes - taps_bytes(s)) / per_block;
  const size_t strips = strips_of(unsigned(s.n), unsigned(s.h_out()), unsigned(s.w_out()));
  const size_t lanes = kBlock / (s.c_in / kVec);
  p.filter_blocks = int(std::min({size_t(kMaxFilterBlocks), fit, std::max<size_t>(1, strips / (lanes * 16))}));
  p.on = pixels * (s.c_in / kVec) < (size_t(1) << 31);
  return p;
}

void depthwise_forward(Context& ctx, const ConvShape& s, const bf16* x, const bf16* w, bf16* y) {
  const float* wt = weights_by_tap(ctx, s, w);
  const Dims d = dims_of(s);
  by_shape(s, [&](auto k, auto st) {
    forward_kernel<decltype(k)::value, decltype(st)::value>
        <<<pass_blocks(d, strips_of(d.n, d.ho, d.wo)), block_threads(d), 0, ctx.stream()>>>(
            d, reinterpret_cast<const uint4*>(x), wt, reinterpret_cast<uint4*>(y));
  });
  CONVOY_CUDA_CHECK_LAUNCH();
}

void depthwise_backward_data(Context& ctx, const ConvShape& s, const bf16* dy, const bf16* w, bf16* dx, bool add) {
  const float* wt = weights_by_tap(ctx, s, w);
  const Dims d = dims_of(s);
  const auto* g = reinterpret_cast<const uint4*>(dy);
  auto* out = reinterpret_cast<uint4*>(dx);
  by_shape(s, [&](auto k, auto st) {
    constexpr int K = decltype(k)::value;
    if constexpr (decltype(st)::value == 1)
      backward_data_s1_kernel<K>
          <<<pass_blocks(d, strips_of(d.n, d.h, d.w)), block_threads(d), 0, ctx.stream()>>>(d, g, wt, out, add);
    else
      backward_data_s2_kernel<K>
          <<<pass_blocks(d, size_t(d.n) * d.h * d.w), block_threads(d), 0, ctx.stream()>>>(d, g, wt, out, add);
  });
  CONVOY_CUDA_CHECK_LAUNCH();
}

void depthwise_backward_filter(Context& ctx, const ConvShape& s, const DepthwisePlan& p, const bf16* x, const bf16* dy,
                               float* dw) {
  const Dims d = dims_of(s);
  const unsigned blocks = unsigned(p.filter_blocks);
  const unsigned run = (strips_of(d.n, d.ho, d.wo) + blocks - 1) / blocks;
  float* partial = reinterpret_cast<float*>(static_cast<char*>(ctx.workspace()) + taps_bytes(s));
  by_shape(s, [&](auto k, auto st) {
    filter_partial_kernel<decltype(k)::value, decltype(st)::value><<<blocks, block_threads(d), 0, ctx.stream()>>>(
        d, run, reinterpret_cast<const uint4*>(x), reinterpret_cast<const uint4*>(dy), partial);
  });
  CONVOY_CUDA_CHECK_LAUNCH();
  const unsigned taps = unsigned(s.kh * s.kw), c = unsigned(s.c_in);
  filter_sum_kernel<<<grid_for(size_t(c) * taps * 32), kBlock, 0, ctx.stream()>>>(blocks, taps, c, partial, dw);
  CONVOY_CUDA_CHECK_LAUNCH();
}

}  // namespace convoy::gpu
