// Host-side bf16 for the GPU tests: rounding a float as the GPU stores it (to nearest, ties to
// even), moving float tensors to and from bf16 device buffers, and NCHW <-> NHWC reordering, so
// that a bf16 NHWC result can be compared with the CPU reference's fp32 NCHW one, and packing a
// net's input as its InputLayout stores it.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "train/cuda/gpu_context.h"
#include "train/cuda/input_layout.h"

namespace convoy::test {

inline uint16_t bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

inline float bf16_float(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float round_bf16(float f) { return bf16_float(bf16_bits(f)); }

inline std::vector<float> round_bf16(std::vector<float> v) {
  for (float& x : v) x = round_bf16(x);
  return v;
}

// [n][c][hw] -> [n][hw][c] (to_nhwc) and back; T is float or int32_t (argmax).
template <typename T>
std::vector<T> to_nhwc(const std::vector<T>& x, int n, int c, int hw) {
  std::vector<T> y(x.size());
  for (int i = 0; i < n; ++i)
    for (int ch = 0; ch < c; ++ch)
      for (int p = 0; p < hw; ++p) y[(size_t(i) * hw + p) * c + ch] = x[(size_t(i) * c + ch) * hw + p];
  return y;
}

template <typename T>
std::vector<T> to_nchw(const std::vector<T>& x, int n, int c, int hw) {
  std::vector<T> y(x.size());
  for (int i = 0; i < n; ++i)
    for (int ch = 0; ch < c; ++ch)
      for (int p = 0; p < hw; ++p) y[(size_t(i) * c + ch) * hw + p] = x[(size_t(i) * hw + p) * c + ch];
  return y;
}

// n NHWC samples of the layout's sample shape, stored as the layout says (padding channels and
// pixels zero), by input_source, the function the GPU's augmentation uses too.
inline std::vector<float> pack_input(const gpu::InputLayout& l, int n, const std::vector<float>& nhwc) {
  std::vector<float> out(size_t(n) * l.sample_size());
  for (int s = 0; s < n; ++s)
    for (int i = 0; i < l.h_stored; ++i)
      for (int j = 0; j < l.w_stored; ++j)
        for (int k = 0; k < l.c_stored; ++k) {
          int y, x, ch;
          out[((size_t(s) * l.h_stored + i) * l.w_stored + j) * l.c_stored + k] =
              gpu::input_source(l, i, j, k, y, x, ch) ? nhwc[((size_t(s) * l.h + y) * l.w + x) * l.c + ch] : 0.f;
        }
  return out;
}

// A bf16 device buffer holding v rounded.
inline gpu::DeviceBuffer<__nv_bfloat16> up_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> bits(v.size());
  for (size_t i = 0; i < v.size(); ++i) bits[i] = bf16_bits(v[i]);
  gpu::DeviceBuffer<__nv_bfloat16> b(v.size());
  CONVOY_CUDA_CHECK(cudaMemcpy(b.get(), bits.data(), bits.size() * 2, cudaMemcpyHostToDevice));
  return b;
}

// A bf16 device buffer of n NaNs, so that an element a kernel never writes cannot pass.
inline gpu::DeviceBuffer<__nv_bfloat16> poisoned_bf16(size_t n) {
  std::vector<uint16_t> bits(n, 0x7fc0);
  gpu::DeviceBuffer<__nv_bfloat16> b(n);
  CONVOY_CUDA_CHECK(cudaMemcpy(b.get(), bits.data(), n * 2, cudaMemcpyHostToDevice));
  return b;
}

inline std::vector<float> down_bf16(gpu::Context& ctx, const __nv_bfloat16* p, size_t n) {
  ctx.synchronize();
  std::vector<uint16_t> bits(n);
  CONVOY_CUDA_CHECK(cudaMemcpy(bits.data(), p, n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = bf16_float(bits[i]);
  return v;
}

inline std::vector<float> down_bf16(gpu::Context& ctx, const gpu::DeviceBuffer<__nv_bfloat16>& b) {
  return down_bf16(ctx, b.get(), b.size());
}

}  // namespace convoy::test
