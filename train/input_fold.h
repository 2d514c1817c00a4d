// How a bf16 CUDA net stores its input for a stride-2 first convolution that alone reads it (ResNet's
// 7x7 stem): each output pixel's window as one row, 2x2 pixel blocks, or the plain padded pixels.
#pragma once

namespace convoy {

// patches: stored pixel (i, j) holds the k x k window that output pixel (i, j) reads, so the
// convolution is a 1x1 one (a GEMM) over k^2 c channels; blocks: 2x2 pixel blocks folded into the
// channels, a ceil(k/2)-square stride-1 convolution; none: 3 channels padded to 8.
enum class InputFold { patches, blocks, none };

}  // namespace convoy
