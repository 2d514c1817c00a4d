// Per-channel work over row-major [rows, c] tensors (NHWC activations, fc outputs): deterministic
// channel sums, and elementwise passes that know each element's channel. The sums take two
// kernels: blocks of 32 channels x 8 row lanes (or, over 16-byte packs, 8 packs x 32 row lanes)
// sum fixed row ranges into fp32 partials, then one block per channel adds the partials in a fixed
// tree, in double, and hands the totals to a finishing functor. The split depends on the shape
// alone, so every run sums in the same order.
#pragma once
#include <algorithm>
#include <string>
#include <type_traits>

#include "train/cuda/gpu_context.h"
#include "train/cuda/storage.cuh"

namespace convoy::gpu::channels {

constexpr int kTile = 32, kLanes = 8, kMaxParts = 1024, kRowsPerPart = 256, kFinishThreads = 256;

// Row ranges a sum over `rows` is split into.
inline int parts(long long rows) {
  return int(std::clamp<long long>((rows + kRowsPerPart - 1) / kRowsPerPart, 1, kMaxParts));
}

// Hands out 256-byte aligned pieces of the context's workspace, which is free between the ops
// queued on its stream; an op whose scratch does not fit fails with `what`.
class Workspace {
 public:
  explicit Workspace(Context& ctx)
      : base_(static_cast<unsigned char*>(ctx.workspace())), size_(ctx.workspace_bytes()) {}
  template <typename T>
  T* take(size_t count, const char* what) {
    const size_t at = used_;
    used_ += (count * sizeof(T) + 255) & ~size_t(255);
    if (used_ > size_)
      ::convoy::fail(std::string(what) + ": the GPU workspace of " + std::to_string(size_ >> 20) +
                     " MiB is too small for its scratch");
    return reinterpret_cast<T*>(base_ + at);
  }

 private:
  unsigned char* base_;
  size_t size_, used_ = 0;
};

// Terms: begin(ch) once per thread and channel, then operator()(row, ch) -> the two terms of that
// element to add up.
template <typename Terms>
__global__ void partial_sums(long long rows, int c, Terms terms, float2* __restrict__ part) {
  __shared__ float2 acc[kLanes][kTile];
  const int ch = blockIdx.x * kTile + threadIdx.x;
  const long long per = (rows + gridDim.y - 1) / gridDim.y, r0 = blockIdx.y * per, r1 = min(rows, r0 + per);
  float2 s = make_float2(0.f, 0.f);
  if (ch < c) {
    Terms t = terms;
    t.begin(ch);
    long long r = r0 + threadIdx.y;
    // Four rows' loads in flight at a time; the terms are still added in row order.
    for (; r + 3 * kLanes < r1; r += 4 * kLanes) {
      const float2 v0 = t(r, ch), v1 = t(r + kLanes, ch), v2 = t(r + 2 * kLanes, ch), v3 = t(r + 3 * kLanes, ch);
      s.x += v0.x;
      s.y += v0.y;
      s.x += v1.x;
      s.y += v1.y;
      s.x += v2.x;
      s.y += v2.y;
      s.x += v3.x;
      s.y += v3.y;
    }
    for (; r < r1; r += kLanes) {
      const float2 v = t(r, ch);
      s.x += v.x;
      s.y += v.y;
    }
  }
  acc[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && ch < c) {
    for (int l = 1; l < kLanes; ++l) {
      s.x += acc[l][threadIdx.x].x;
      s.y += acc[l][threadIdx.x].y;
    }
    part[size_t(blockIdx.y) * c + ch] = s;
  }
}

constexpr int kTilePacks = 8, kPackLanes = 32;

// The rows [first, end) a block of a pack-wise partial sum covers (its grid's y index), and a
// thread's first row in it: a thread steps kPackLanes rows at a time.
struct PackRows {
  long long first, end;
};
__device__ __forceinline__ PackRows pack_rows(long long rows) {
  const long long per = (rows + gridDim.y - 1) / gridDim.y, r0 = blockIdx.y * per;
  return {r0 + threadIdx.y, min(rows, r0 + per)};
}

// Ends a pack-wise partial sum: each thread's S sets of V channel sums s (zero for a thread past
// the last pack) are added over the block's row lanes in lane order and stored, set k into
// part[k] at the block's row range ([gridDim.y, c] float2 each). Every kernel that sums packs
// ends here, so their sums are the same bits for the same terms.
template <int V, int S = 1>
__device__ __forceinline__ void store_pack_partials(const float2 (&s)[S][V], int cp, float2* const* part) {
  __shared__ float2 acc[kPackLanes][kTilePacks * V];
  const int col = threadIdx.y * kTilePacks + threadIdx.x, c = cp * V, ch = blockIdx.x * kTilePacks * V + col;
#pragma unroll
  for (int k = 0; k < S; ++k) {
    if (k > 0) __syncthreads();  // the previous set's lanes are read
#pragma unroll
    for (int j = 0; j < V; ++j) acc[threadIdx.y][threadIdx.x * V + j] = s[k][j];
    __syncthreads();
    if (col < kTilePacks * V && ch < c) {
      float2 tot = acc[0][col];
      for (int l = 1; l < kPackLanes; ++l) tot.x += acc[l][col].x, tot.y += acc[l][col].y;
      part[k][size_t(blockIdx.y) * c + ch] = tot;
    }
  }
}

// The grid and block of a pack-wise partial sum over rows x cp packs (parts(rows) row ranges).
inline dim3 pack_grid(long long rows, int cp) { return dim3((cp + kTilePacks - 1) / kTilePacks, parts(rows)); }
inline dim3 pack_block() { return dim3(kTilePacks, kPackLanes); }

// Per-channel pairs (a[ch], b[ch]) of a pack-wise block's channels into shared memory, by all its
// threads, for a pass to read at each use after a __syncthreads: held in registers for a thread's
// whole pack they crowd out the blocks an SM could hold. A row of V + 1 keeps a warp's threads,
// on neighbouring packs, on different banks; pairs past the last channel are zero.
template <int V>
__device__ __forceinline__ void stage_channel_pairs(float2 (&to)[kTilePacks][V + 1], int cp, const float* a,
                                                    const float* b) {
  const int col = threadIdx.y * kTilePacks + threadIdx.x, ch = blockIdx.x * kTilePacks * V + col;
  if (col < kTilePacks * V) to[col / V][col % V] = ch < cp * V ? make_float2(a[ch], b[ch]) : float2{};
}

// As partial_sums, over packs of V channels: Terms::stage_pack<V>(consts, cp) by every thread,
// then pack<V>(row, p, out) -> the two terms of each of the pack's V elements. One 16-byte load
// per element group instead of V two-byte ones keeps the memory system busy. Four blocks per SM
// at least (batch norm's gradient terms took registers for three: 2.9 TB/s against 3.2 on the
// H200 for ResNet-50's passes).
template <int V, typename Terms>
__global__ void __launch_bounds__(256, 4)
    partial_sums_packs(long long rows, int cp, Terms terms, float2* __restrict__ part) {
  const int p = blockIdx.x * kTilePacks + threadIdx.x;
  const PackRows rr = pack_rows(rows);
  __shared__ float2 consts[kTilePacks][V + 1];
  Terms t = terms;
  t.template stage_pack<V>(consts, cp);
  __syncthreads();
  float2 s[1][V];
#pragma unroll
  for (int j = 0; j < V; ++j) s[0][j] = make_float2(0.f, 0.f);
  if (p < cp) {
#pragma unroll 2  // two rows' loads in flight; the terms are still added in row order
    for (long long r = rr.first; r < rr.end; r += kPackLanes) {
      float2 v[V];
      t.template pack<V>(r, p, v);
#pragma unroll
      for (int j = 0; j < V; ++j) s[0][j].x += v[j].x, s[0][j].y += v[j].y;
    }
  }
  float2* const out[1] = {part};
  store_pack_partials<V>(s, cp, out);
}

// Finish: operator()(ch, sum of first terms, sum of second terms).
template <typename Finish>
__global__ void finish_sums(int c, int parts, const float2* __restrict__ part, Finish finish) {
  __shared__ double a[kFinishThreads], b[kFinishThreads];
  const int ch = blockIdx.x;
  double s0 = 0, s1 = 0;
  for (int p = threadIdx.x; p < parts; p += blockDim.x) {
    const float2 v = part[size_t(p) * c + ch];
    s0 += v.x;
    s1 += v.y;
  }
  a[threadIdx.x] = s0;
  b[threadIdx.x] = s1;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      a[threadIdx.x] += a[threadIdx.x + half];
      b[threadIdx.x] += b[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) finish(ch, a[0], b[0]);
}

// The finishing kernel alone, over partials another kernel left in `part` (parts(rows) * c float2).
template <typename Finish>
void finish_parts(Context& ctx, long long rows, int c, const Finish& finish, const float2* part) {
  finish_sums<<<c, kFinishThreads, 0, ctx.stream()>>>(c, parts(rows), part, finish);
  CONVOY_CUDA_CHECK_LAUNCH();
}

// Queues both kernels; `part` holds parts(rows) * c float2. With V > 1 the terms are read in packs
// of V channels (c % V == 0, Terms' pointers aligned to packs).
template <int V = 1, typename Terms, typename Finish>
void sums(Context& ctx, long long rows, int c, const Terms& terms, const Finish& finish, float2* part) {
  const int p = parts(rows);
  if constexpr (V == 1) {
    partial_sums<<<dim3((c + kTile - 1) / kTile, p), dim3(kTile, kLanes), 0, ctx.stream()>>>(rows, c, terms, part);
  } else {
    partial_sums_packs<V><<<pack_grid(rows, c / V), pack_block(), 0, ctx.stream()>>>(rows, c / V, terms, part);
  }
  CONVOY_CUDA_CHECK_LAUNCH();
  finish_parts(ctx, rows, c, finish, part);
}

// Grid-stride over the `total` elements of a [rows, c] tensor, calling f(i, ch); the channel is
// carried along rather than divided out for every element. Over packs of V channels, pass the
// pack count and c / V: ch is then the pack's first channel / V.
template <typename F>
__device__ __forceinline__ void for_each_element(size_t total, int c, F&& f) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  int ch = int(i % size_t(c));
  const int step = int(stride % size_t(c));
  for (; i < total; i += stride) {
    f(i, ch);
    ch += step;
    if (ch >= c) ch -= c;
  }
}

// Grid-stride over the packs of a [rows, cp] tensor (cp packs of channels per row) with a stride of
// whole rows, so that a thread meets one channel pack only: begin(pack) once, then f(k) for each of
// its packs k. A pass that needs per-channel factors then loads them once per thread, not once per
// pack (with one pack per thread, batch norm's elementwise passes moved 1.5-1.8 TB/s on the H200,
// against 3.3-4.3 for passes without factors). Launch with grid_for_rows; threads past the grid's
// last whole row do nothing.
template <typename Begin, typename F>
__device__ __forceinline__ void for_each_in_channel_pack(size_t total, int cp, Begin&& begin, F&& f) {
  const size_t threads = size_t(gridDim.x) * blockDim.x;
  const size_t stride = threads / size_t(cp) * size_t(cp);
  const size_t first = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (first >= stride || first >= total) return;
  begin(int(first % size_t(cp)));
  for (size_t k = first; k < total; k += stride) f(k);
}

// Blocks of 256 threads for for_each_in_channel_pack over `total` packs, cp per row: one full wave of
// the GPU (as many as its SMs hold of `kernel` at once), so that no partial last wave leaves SMs
// idle, yet at least one whole row.
template <auto kernel>
unsigned grid_for_rows(size_t total, int cp) {
  static const unsigned wave = [] {
    int device = 0, sms = 0, per_sm = 0;
    CONVOY_CUDA_CHECK(cudaGetDevice(&device));
    CONVOY_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    CONVOY_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 256, 0));
    return unsigned(std::max(1, sms * per_sm));
  }();
  const unsigned row = unsigned((size_t(cp) + 255) / 256);
  return std::max(row, std::min(grid_for(total), wave));
}

template <typename T, int V>
__global__ void add_bias(size_t packs, int c, const float* __restrict__ b, T* __restrict__ y) {
  using P = Pack<T, V>;
  for_each_element(packs, c / V, [&](size_t k, int cp) {
    P p = reinterpret_cast<P*>(y)[k];
#pragma unroll
    for (int j = 0; j < V; ++j) p.v[j] = store<T>(load(p.v[j]) + b[cp * V + j]);
    reinterpret_cast<P*>(y)[k] = p;
  });
}

// Calls f with the widest pack of T that whole rows of c channels and every pointer allow: 16
// bytes, or single elements.
template <typename T, typename F, typename... Ptr>
void with_pack(int c, F&& f, const Ptr*... p) {
  constexpr int V = kPack<T>;
  if (c % V == 0 && pack_aligned<T, V>(p...))
    f(std::integral_constant<int, V>{});
  else
    f(std::integral_constant<int, 1>{});
}

template <typename T>
struct Plain {
  const T* g;
  int c;
  __device__ void begin(int) {}
  __device__ float2 operator()(long long r, int ch) const { return make_float2(load(g[size_t(r) * c + ch]), 0.f); }
};

struct Store {
  float* out;
  __device__ void operator()(int ch, double s, double) const { out[ch] = float(s); }
};

// y[r][ch] += b[ch] (fp32 bias, y rounded once).
template <typename T>
void add_channel_bias(Context& ctx, long long rows, int c, const float* b, T* y) {
  with_pack<T>(
      c,
      [&](auto v) {
        constexpr int V = decltype(v)::value;
        const size_t packs = size_t(rows) * c / V;
        add_bias<T, V><<<grid_for(packs), 256, 0, ctx.stream()>>>(packs, c, b, y);
      },
      y);
  CONVOY_CUDA_CHECK_LAUNCH();
}

// db[ch] = sum over rows of dy[r][ch], in fp32.
template <typename T>
void channel_bias_grad(Context& ctx, long long rows, int c, const T* dy, float* db) {
  Workspace ws(ctx);
  sums(ctx, rows, c, Plain<T>{dy, c}, Store{db}, ws.take<float2>(size_t(parts(rows)) * c, "bias gradient"));
}

}  // namespace convoy::gpu::channels
