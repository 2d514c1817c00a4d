// How a bf16 CUDA net stores its input for a first convolution that alone reads it (ResNet's 7x7/2
// stem; a gray 3x3/1 one): each output pixel's window as one row, 2x2 pixel blocks, or the plain pixels.
#pragma once

namespace convoy {

// patches: stored pixel (i, j) holds the k x k window that output pixel (i, j) reads, so the
// convolution is a 1x1 one (a GEMM) over k^2 c channels; blocks: 2x2 pixel blocks folded into the
// channels, a ceil(k/2)-square stride-1 convolution (stride 2 only); none: 3 channels padded to 8.
// patches at stride 1 only where a window holds at most 32 values (GpuNet::choose_input_layout).
enum class InputFold { patches, blocks, none };

}  // namespace convoy
