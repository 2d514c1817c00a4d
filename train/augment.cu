// CUDA twin of augment.cpp: the stored uint8 samples go to the GPU and are cropped, flipped and
// normalised there, from the crop/flip choices the loader drew on the CPU.
#include "train/layers/gpu_ops.h"

namespace convoy::gpu {
namespace {

// One thread per output value, in CHW order, so the writes coalesce; the same arithmetic as
// Augmenter::apply (v * scale + shift in float), hence bit-identical output.
__global__ void augment(AugmentShape s, const uint8_t* __restrict__ hwc, const int32_t* __restrict__ crops,
                        const float* __restrict__ scale_shift, float* __restrict__ chw) {
  const size_t plane = size_t(s.out_h) * s.out_w, per = plane * s.c;
  CONVOY_GRID_STRIDE(k, size_t(s.n) * per) {
    const size_t n = k / per, r = k % per;
    const int c = int(r / plane), y = int(r % plane) / s.out_w, x = int(r % plane) % s.out_w;
    const int32_t* cf = crops + 3 * n;
    const int sy = cf[0] + y - s.pad, sx = cf[1] + (cf[2] ? s.out_w - 1 - x : x) - s.pad;
    const float v = (sy >= 0 && sy < s.h && sx >= 0 && sx < s.w)
                        ? float(hwc[n * size_t(s.h) * s.w * s.c + (size_t(sy) * s.w + sx) * s.c + c])
                        : 0.f;
    // No fused multiply-add: the CPU rounds the product, then the sum.
    chw[k] = __fadd_rn(__fmul_rn(v, scale_shift[c]), scale_shift[s.c + c]);
  }
}

}  // namespace

void augment_forward(Context& ctx, const AugmentShape& s, const uint8_t* hwc, const int32_t* crops,
                     const float* scale_shift, float* chw) {
  const size_t total = size_t(s.n) * s.c * s.out_h * s.out_w;
  augment<<<grid_for(total), 256, 0, ctx.stream()>>>(s, hwc, crops, scale_shift, chw);
  CONVOY_CUDA_CHECK_LAUNCH();
}

}  // namespace convoy::gpu
