// What a CUDA net's activations are stored as, for the host code that declares and launches the
// kernels: bf16 or float elements, NCHW or NHWC (storage.cuh loads and stores them on the device).
#pragma once
#include <cuda_bf16.h>

namespace convoy::gpu {

using bf16 = __nv_bfloat16;

// Where the (n, c, h, w) elements of an activation lie: fp32 and tf32 nets keep the CPU's NCHW;
// bf16 nets keep NHWC, the layout cuDNN's tensor-core convolutions read and write. Ops templated on
// the element type T take float (fp32 arithmetic, as before) or bf16 (fp32 arithmetic, each stored
// value rounded to bf16).
enum class Layout { nchw, nhwc };

}  // namespace convoy::gpu
