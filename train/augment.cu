// CUDA twin of augment.cpp: the stored uint8 samples go to the GPU and are cropped, flipped and
// normalised there, from the crop/flip choices the loader drew on the CPU, into the layout and
// element type the net reads (fp32 NCHW, or bf16 NHWC for a bf16 net).
#include "shared/log.h"
#include "train/layers/gpu_ops.h"
#include "train/layers/storage.cuh"

namespace convoy::gpu {
namespace {

// The NHWC output's stored layout: the AugmentShape's, or c channels per pixel as they are.
InputLayout nhwc_layout(const AugmentShape& s) {
  return s.packed.c_stored ? s.packed : plain_input(s.c, s.out_h, s.out_w, s.c);
}

// One thread per output value, in output order, so the writes coalesce; the same arithmetic as
// Augmenter::apply (v * scale + shift in float), hence bit-identical float output. NHWC output goes
// through the stored layout: padding channels and (space to depth) the convolution's padding
// pixels are zero, every other value the augmented sample's.
template <typename T, Layout L>
__global__ void augment(AugmentShape s, InputLayout l, const uint8_t* __restrict__ hwc,
                        const int32_t* __restrict__ crops, const float* __restrict__ scale_shift,
                        T* __restrict__ out) {
  const size_t plane = size_t(s.out_h) * s.out_w;
  const size_t per = L == Layout::nchw ? plane * s.c : l.sample_size();
  CONVOY_GRID_STRIDE(k, size_t(s.n) * per) {
    const size_t n = k / per, r = k % per;
    int c, y, x;
    if (L == Layout::nchw) {
      c = int(r / plane), y = int(r % plane) / s.out_w, x = int(r % plane) % s.out_w;
    } else {
      const int p = int(r / l.c_stored);
      if (!input_source(l, p / l.w_stored, p % l.w_stored, int(r % l.c_stored), y, x, c)) {
        out[k] = store<T>(0.f);
        continue;
      }
    }
    const int32_t* cf = crops + 3 * n;
    const int sy = cf[0] + y - s.pad, sx = cf[1] + (cf[2] ? s.out_w - 1 - x : x) - s.pad;
    const float v = (sy >= 0 && sy < s.h && sx >= 0 && sx < s.w)
                        ? float(hwc[n * size_t(s.h) * s.w * s.c + (size_t(sy) * s.w + sx) * s.c + c])
                        : 0.f;
    // No fused multiply-add: the CPU rounds the product, then the sum.
    out[k] = store<T>(__fadd_rn(__fmul_rn(v, scale_shift[c]), scale_shift[s.c + c]));
  }
}

}  // namespace

template <typename T>
void augment_forward(Context& ctx, const AugmentShape& s, const uint8_t* hwc, const int32_t* crops,
                     const float* scale_shift, T* out, Layout layout) {
  const InputLayout l = nhwc_layout(s);
  if (l.c != s.c || l.h != s.out_h || l.w != s.out_w) fail("augment: the stored layout is of another sample shape");
  const size_t total = s.n * (layout == Layout::nchw ? size_t(s.c) * s.out_h * s.out_w : l.sample_size());
  if (layout == Layout::nchw)
    augment<T, Layout::nchw><<<grid_for(total), 256, 0, ctx.stream()>>>(s, l, hwc, crops, scale_shift, out);
  else
    augment<T, Layout::nhwc><<<grid_for(total), 256, 0, ctx.stream()>>>(s, l, hwc, crops, scale_shift, out);
  CONVOY_CUDA_CHECK_LAUNCH();
}

template void augment_forward<float>(Context&, const AugmentShape&, const uint8_t*, const int32_t*, const float*,
                                     float*, Layout);
template void augment_forward<bf16>(Context&, const AugmentShape&, const uint8_t*, const int32_t*, const float*,
                                    bf16*, Layout);

}  // namespace convoy::gpu
