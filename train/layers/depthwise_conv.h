// Depthwise convolutions (groups = c_in = c_out) in bf16 NHWC by own kernels: cuDNN's legacy API
// ran MobileNetV2's 3x3 depthwise layers an order of magnitude below memory speed on the H200.
#pragma once
#include <cstddef>

#include "train/cuda/storage.h"
#include "train/layers/conv.h"

namespace convoy::gpu {

class Context;

// How the kernels split a shape; a function of the shape and the workspace only, so that the
// filter gradient's sums run in the same order on every GPU and every run.
struct DepthwisePlan {
  bool on = false;        // the shape qualifies and fits the workspace
  int filter_blocks = 0;  // blocks of the filter gradient's first pass, each one partial sum per weight
};

// A bf16 depthwise 3x3 or 5x5 convolution of channels a multiple of 8 (at most 2048), unpadded and
// unfolded input: the shapes the kernels handle; the plan's workspace use fits `workspace_bytes`.
DepthwisePlan plan_depthwise(const ConvShape& s, size_t workspace_bytes);

// y = conv(x, w); w is the bf16 copy [c, kh, kw].
void depthwise_forward(Context& ctx, const ConvShape& s, const bf16* x, const bf16* w, bf16* y);
// dx = (or +=, with add) the input gradient of dy.
void depthwise_backward_data(Context& ctx, const ConvShape& s, const bf16* dy, const bf16* w, bf16* dx, bool add);
// dw [c, kh, kw] fp32 = the filter gradient, summed in a fixed order (deterministic).
void depthwise_backward_filter(Context& ctx, const ConvShape& s, const DepthwisePlan& p, const bf16* x, const bf16* dy,
                               float* dw);

}  // namespace convoy::gpu
