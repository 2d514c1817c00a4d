// Device-side addressing of (n, c, y, x) in the two activation layouts, so that one kernel body
// serves NCHW and NHWC: an element's pixel, and where its (n, c) plane lies in a tensor of the same
// n and c but another height and width (a pooling's input or output).
#pragma once
#include <cstddef>
#include <type_traits>

#include "train/cuda/storage.h"

namespace convoy::gpu {

// Element i of an [n, c, ha, wa] tensor: its row y and column x, and the offset `base` of its (n, c)
// plane in an [n, c, hb, wb] tensor, whose pixel (y', x') then lies at base + (y' * wb + x') * stride.
// Index is unsigned for tensors below 2^32 elements (cheaper division) and size_t above.
template <Layout L>
struct Planes;

template <>
struct Planes<Layout::nchw> {
  __host__ __device__ static constexpr int stride(int) { return 1; }
  template <typename Index>
  __device__ static void locate(Index i, int, int ha, int wa, int hb, int wb, int& y, int& x, size_t& base) {
    x = int(i % Index(wa));
    y = int(i / Index(wa) % Index(ha));
    base = size_t(i / (Index(ha) * Index(wa))) * size_t(hb) * wb;
  }
};

template <>
struct Planes<Layout::nhwc> {
  __host__ __device__ static constexpr int stride(int c) { return c; }
  template <typename Index>
  __device__ static void locate(Index i, int c, int ha, int wa, int hb, int wb, int& y, int& x, size_t& base) {
    const Index ch = i % Index(c), p = i / Index(c);
    x = int(p % Index(wa));
    y = int(p / Index(wa) % Index(ha));
    base = size_t(p / (Index(ha) * Index(wa))) * size_t(hb) * wb * c + size_t(ch);
  }
};

// Calls f(layout tag, index) with the layout as a std::integral_constant and an index value of the
// type a grid-stride loop over `total` elements may use: unsigned while index + grid stride cannot
// wrap, size_t beyond.
template <typename F>
void with_layout(Layout layout, size_t total, F&& f) {
  using Nchw = std::integral_constant<Layout, Layout::nchw>;
  using Nhwc = std::integral_constant<Layout, Layout::nhwc>;
  const bool narrow = total < (size_t(1) << 31);
  if (layout == Layout::nchw) {
    if (narrow)
      f(Nchw{}, 0u);
    else
      f(Nchw{}, size_t(0));
  } else {
    if (narrow)
      f(Nhwc{}, 0u);
    else
      f(Nhwc{}, size_t(0));
  }
}

}  // namespace convoy::gpu
