// CUDA twin of Augmenter::normalize: the loader's cropped and resized uint8 samples go to the GPU
// and are mirrored (per sample) and normalised there into the layout and element type the net reads
// (fp32 NCHW, or bf16 NHWC for a bf16 net); the crops and resizes were made on the CPU, so both
// backends see the same bytes.
#include "shared/log.h"
#include "train/cuda/storage.cuh"
#include "train/gpu_augment.h"
#include "train/gpu_context.h"

namespace convoy::gpu {
namespace {

// The NHWC output's stored layout: the InputShape's, or c channels per pixel as they are.
InputLayout nhwc_layout(const InputShape& s) { return s.packed.c_stored ? s.packed : plain_input(s.c, s.h, s.w, s.c); }

// One thread per output value, in output order, so the writes coalesce; the same arithmetic as
// Augmenter::normalize (v * scale + shift in float), hence bit-identical float output. NHWC output
// goes through the stored layout: padding channels and (space to depth) the convolution's padding
// pixels are zero, every other value the sample's.
template <typename T, Layout L>
__global__ void normalize(InputShape s, InputLayout l, const uint8_t* __restrict__ hwc,
                          const uint8_t* __restrict__ flips, const float* __restrict__ scale_shift,
                          T* __restrict__ out) {
  const size_t plane = size_t(s.h) * s.w;
  const size_t per = L == Layout::nchw ? plane * s.c : l.sample_size();
  CONVOY_GRID_STRIDE(k, size_t(s.n) * per) {
    const size_t n = k / per, r = k % per;
    int c, y, x;
    if (L == Layout::nchw) {
      c = int(r / plane), y = int(r % plane) / s.w, x = int(r % plane) % s.w;
    } else {
      const int p = int(r / l.c_stored);
      if (!input_source(l, p / l.w_stored, p % l.w_stored, int(r % l.c_stored), y, x, c)) {
        out[k] = store<T>(0.f);
        continue;
      }
    }
    if (flips[n]) x = s.w - 1 - x;
    const float v = float(hwc[n * plane * s.c + (size_t(y) * s.w + x) * s.c + c]);
    // No fused multiply-add: the CPU rounds the product, then the sum.
    out[k] = store<T>(__fadd_rn(__fmul_rn(v, scale_shift[c]), scale_shift[s.c + c]));
  }
}

}  // namespace

template <typename T>
void normalize_input(Context& ctx, const InputShape& s, const uint8_t* hwc, const uint8_t* flips,
                     const float* scale_shift, T* out, Layout layout) {
  const InputLayout l = nhwc_layout(s);
  if (l.c != s.c || l.h != s.h || l.w != s.w) fail("normalize_input: the stored layout is of another sample shape");
  const size_t total = s.n * (layout == Layout::nchw ? size_t(s.c) * s.h * s.w : l.sample_size());
  if (layout == Layout::nchw)
    normalize<T, Layout::nchw><<<grid_for(total), 256, 0, ctx.stream()>>>(s, l, hwc, flips, scale_shift, out);
  else
    normalize<T, Layout::nhwc><<<grid_for(total), 256, 0, ctx.stream()>>>(s, l, hwc, flips, scale_shift, out);
  CONVOY_CUDA_CHECK_LAUNCH();
}

template void normalize_input<float>(Context&, const InputShape&, const uint8_t*, const uint8_t*, const float*, float*,
                                     Layout);
template void normalize_input<bf16>(Context&, const InputShape&, const uint8_t*, const uint8_t*, const float*, bf16*,
                                    Layout);

}  // namespace convoy::gpu
