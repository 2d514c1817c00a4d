// CUDA twin of Augmenter::normalize: the loader's cropped and resized uint8 samples go to the GPU
// and are mirrored (per sample) and normalised there into the layout and element type the net reads
// (fp32 NCHW, or bf16 NHWC for a bf16 net); the crops and resizes were made on the CPU, so both
// backends see the same bytes.
#include <algorithm>

#include "shared/log.h"
#include "train/cuda/gpu_context.h"
#include "train/cuda/normalize_input.h"
#include "train/cuda/storage.cuh"

namespace convoy::gpu {
namespace {

// The NHWC output's stored layout: the InputShape's, or c channels per pixel as they are.
InputLayout nhwc_layout(const InputShape& s) { return s.packed.c_stored ? s.packed : plain_input(s.c, s.h, s.w, s.c); }

// The value of sample pixel (y, x), channel c, as Augmenter::normalize makes it (v * scale + shift
// in float, no fused multiply-add: the CPU rounds the product, then the sum), hence bit-identical
// float output.
__device__ __forceinline__ float normalized(uint8_t v, float scale, float shift) {
  return __fadd_rn(__fmul_rn(float(v), scale), shift);
}

__device__ __forceinline__ float normalized(const uint8_t* sample, const InputShape& s, int y, int x, int c,
                                            const float* scale_shift) {
  return normalized(sample[(size_t(y) * s.w + x) * s.c + c], scale_shift[c], scale_shift[s.c + c]);
}

// NCHW: one thread per output value, in output order, so the writes coalesce.
template <typename T>
__global__ void normalize_nchw(InputShape s, const uint8_t* __restrict__ hwc, const uint8_t* __restrict__ flips,
                               const float* __restrict__ scale_shift, T* __restrict__ out) {
  const size_t plane = size_t(s.h) * s.w, per = plane * s.c;
  CONVOY_GRID_STRIDE(k, size_t(s.n) * per) {
    const size_t n = k / per, r = k % per;
    const int c = int(r / plane), y = int(r % plane) / s.w;
    int x = int(r % plane) % s.w;
    if (flips[n]) x = s.w - 1 - x;
    out[k] = store<T>(normalized(hwc + n * per, s, y, x, c, scale_shift));
  }
}

// NHWC, through the stored layout (padding channels and, folded, the convolution's padding pixels
// are zero): one thread per stored pixel, its c_stored values in V-wide stores (16 bytes
// where c_stored allows). One thread per value, with 64-bit index arithmetic for each, moved a
// tenth of the memory's bandwidth on a ResNet's space-to-depth input.
template <typename T, int V>
__global__ void normalize_pixels(InputShape s, InputLayout l, const uint8_t* __restrict__ hwc,
                                 const uint8_t* __restrict__ flips, const float* __restrict__ scale_shift,
                                 T* __restrict__ out) {
  const int pixels = l.h_stored * l.w_stored;
  const size_t plane = size_t(s.h) * s.w;
  for (int n = blockIdx.y; n < s.n; n += gridDim.y) {
    const uint8_t* src = hwc + size_t(n) * plane * s.c;
    const bool flip = flips[n] != 0;
    for (int p = blockIdx.x * blockDim.x + threadIdx.x; p < pixels; p += gridDim.x * blockDim.x) {
      const int i = p / l.w_stored, j = p % l.w_stored;
      T* dst = out + (size_t(n) * pixels + p) * l.c_stored;
      for (int k0 = 0; k0 < l.c_stored; k0 += V) {
        Pack<T, V> pk;
#pragma unroll
        for (int q = 0; q < V; ++q) {
          int y, x, c;
          float v = 0.f;
          if (input_source(l, i, j, k0 + q, y, x, c)) v = normalized(src, s, y, flip ? s.w - 1 - x : x, c, scale_shift);
          pk.v[q] = store<T>(v);
        }
        *reinterpret_cast<Pack<T, V>*>(dst + k0) = pk;
      }
    }
  }
}

// Patches, for a k x k window over c channels known at compile time: kPatchPixels consecutive
// stored pixels per block, which lie in one contiguous run of memory. A thread per (pixel, window
// row) writes that row's K C values into shared memory, unrolled, so its loads are all in flight
// at once; then the block copies the run out in 16-byte stores. 32-bit indices (the caller checks).
constexpr int kPatchPixels = 32;

template <typename T, int K, int C>
__global__ void normalize_patches(InputShape s, InputLayout l, const uint8_t* __restrict__ hwc,
                                  const uint8_t* __restrict__ flips, const float* __restrict__ scale_shift,
                                  T* __restrict__ out) {
  extern __shared__ __align__(16) unsigned char patch_smem[];
  T* rows = reinterpret_cast<T*>(patch_smem);
  float scale[C], shift[C];
#pragma unroll
  for (int ch = 0; ch < C; ++ch) scale[ch] = scale_shift[ch], shift[ch] = scale_shift[C + ch];
  const unsigned pixels = unsigned(l.h_stored) * unsigned(l.w_stored), total = unsigned(s.n) * pixels;
  const unsigned first = blockIdx.x * kPatchPixels;
  const int count = int(min(unsigned(kPatchPixels), total - first)), tail = l.c_stored - K * K * C;
  for (int r = threadIdx.x; r < count * K; r += blockDim.x) {
    const int q = r / K, ky = r % K;
    const unsigned g = first + q, n = g / pixels, p = g % pixels;
    const int i = int(p / unsigned(l.w_stored)), j = int(p % unsigned(l.w_stored)), y = l.stride * i + ky - l.pad;
    const bool flip = flips[n] != 0, in_row = y >= 0 && y < s.h;
    const uint8_t* src = hwc + (size_t(n) * s.h + (in_row ? y : 0)) * s.w * C;
    T* dst = rows + q * l.c_stored + ky * K * C;
#pragma unroll
    for (int kx = 0; kx < K; ++kx) {
      const int x = l.stride * j + kx - l.pad, xs = flip ? s.w - 1 - x : x;
      const bool in = in_row && x >= 0 && x < s.w;
#pragma unroll
      for (int ch = 0; ch < C; ++ch)
        dst[kx * C + ch] = store<T>(in ? normalized(src[xs * C + ch], scale[ch], shift[ch]) : 0.f);
    }
  }
  for (int r = threadIdx.x; r < count * tail; r += blockDim.x)
    rows[(r / tail) * l.c_stored + K * K * C + r % tail] = store<T>(0.f);
  __syncthreads();
  using P = Pack<T, kPack<T>>;
  const P* from = reinterpret_cast<const P*>(rows);
  P* to = reinterpret_cast<P*>(out + size_t(first) * l.c_stored);
  for (int r = threadIdx.x; r < count * l.c_stored / kPack<T>; r += blockDim.x) to[r] = from[r];
}

// The patches kernel for the window and channel counts it is built for, or false.
template <typename T>
bool normalize_patches_for(Context& ctx, const InputShape& s, const InputLayout& l, const uint8_t* hwc,
                           const uint8_t* flips, const float* scale_shift, T* out) {
  const size_t total = size_t(s.n) * l.h_stored * l.w_stored;
  if (l.fold != InputFold::patches || l.c_stored % kPack<T> != 0 || !pack_aligned<T, kPack<T>>(out) ||
      total >= (size_t(1) << 31))
    return false;
  const unsigned blocks = unsigned((total + kPatchPixels - 1) / kPatchPixels);
  const size_t smem = kPatchPixels * l.c_stored * sizeof(T);
  auto launch = [&](auto kernel) { kernel<<<blocks, 256, smem, ctx.stream()>>>(s, l, hwc, flips, scale_shift, out); };
  if (l.k == 7 && l.c == 3)
    launch(normalize_patches<T, 7, 3>);
  else if (l.k == 3 && l.c == 3)
    launch(normalize_patches<T, 3, 3>);
  else if (l.k == 3 && l.c == 1)
    launch(normalize_patches<T, 3, 1>);
  else if (l.k == 5 && l.c == 1)
    launch(normalize_patches<T, 5, 1>);
  else
    return false;
  return true;
}

template <typename T>
void normalize_nhwc(Context& ctx, const InputShape& s, const InputLayout& l, const uint8_t* hwc, const uint8_t* flips,
                    const float* scale_shift, T* out) {
  constexpr int V = kPack<T>;
  if (normalize_patches_for(ctx, s, l, hwc, flips, scale_shift, out)) return;
  const unsigned pixels = unsigned(l.h_stored) * unsigned(l.w_stored);
  const dim3 grid(std::min((pixels + 255) / 256, 1024u), unsigned(std::min(s.n, 65535)));
  if (l.c_stored % V == 0 && pack_aligned<T, V>(out))
    normalize_pixels<T, V><<<grid, 256, 0, ctx.stream()>>>(s, l, hwc, flips, scale_shift, out);
  else
    normalize_pixels<T, 1><<<grid, 256, 0, ctx.stream()>>>(s, l, hwc, flips, scale_shift, out);
}

}  // namespace

template <typename T>
void normalize_input(Context& ctx, const InputShape& s, const uint8_t* hwc, const uint8_t* flips,
                     const float* scale_shift, T* out, Layout layout) {
  const InputLayout l = nhwc_layout(s);
  if (l.c != s.c || l.h != s.h || l.w != s.w) fail("normalize_input: the stored layout is of another sample shape");
  const size_t total = s.n * (layout == Layout::nchw ? size_t(s.c) * s.h * s.w : l.sample_size());
  if (layout == Layout::nchw)
    normalize_nchw<T><<<grid_for(total), 256, 0, ctx.stream()>>>(s, hwc, flips, scale_shift, out);
  else if (s.n > 0)
    normalize_nhwc(ctx, s, l, hwc, flips, scale_shift, out);
  CONVOY_CUDA_CHECK_LAUNCH();
}

template void normalize_input<float>(Context&, const InputShape&, const uint8_t*, const uint8_t*, const float*, float*,
                                     Layout);
template void normalize_input<bf16>(Context&, const InputShape&, const uint8_t*, const uint8_t*, const float*, bf16*,
                                    Layout);

}  // namespace convoy::gpu
