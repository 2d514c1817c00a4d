// ReLU and residual add, elementwise over flat float buffers. Shared with the CUDA twins
// (elementwise.cu).
#pragma once
#include <cstddef>

namespace convoy {

// Below this many elements an elementwise op runs on one thread: waking a team costs more.
constexpr size_t kParallelMin = size_t(1) << 16;

void relu_forward(size_t count, const float* x, float* y);
// Uses the forward output: dx = dy where y > 0.
void relu_backward(size_t count, const float* y, const float* dy, float* dx);
// y = a + b (the residual join); its backward hands dy to both inputs unchanged.
void add_forward(size_t count, const float* a, const float* b, float* y);
// dst += src, for gradients that reach one tensor from several consumers.
void accumulate(size_t count, const float* src, float* dst);

}  // namespace convoy
