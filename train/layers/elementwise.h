// The relu and add ops (`type = "relu"`, "add", the residual join) and gradient accumulation,
// elementwise over flat buffers: the CPU reference (elementwise.cpp) and the CUDA twins for fp32
// or bf16 elements (elementwise.cu).
#pragma once
#include <cstddef>
#include <cstdint>

#include "train/layers/op.h"

#if CONVOY_HAVE_CUDA
#include "train/cuda/channel_affine.h"
#include "train/cuda/storage.h"
#endif

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

// A ReLU is often run by the layer before it (OpFusion::relu, relu_bf16): then it does nothing.
class ReluOp final : public Op {
 public:
  const char* type() const override { return "relu"; }
  bool is_relu() const override { return true; }
  OpShape shape(const ShapeIn& in) const override;
  double forward(const CpuLayer& l) const override;
  void backward(const CpuLayer& l, int k) const override;
#if CONVOY_HAVE_CUDA
  void gpu_forward(const gpu::GpuLayer& l) const override;
  void gpu_backward(const gpu::GpuLayer& l, int k) const override;
#endif
};

class AddOp final : public Op {
 public:
  const char* type() const override { return "add"; }
  bool joins_residual() const override { return true; }
  int arity() const override { return 2; }
  OpFusion fusion(const Node& nd) const override;
  OpShape shape(const ShapeIn& in) const override;
  double forward(const CpuLayer& l) const override;
  void backward(const CpuLayer& l, int k) const override;
#if CONVOY_HAVE_CUDA
  void gpu_forward(const gpu::GpuLayer& l) const override;
  void gpu_backward(const gpu::GpuLayer& l, int k) const override;
  bool gpu_backward_all(const gpu::GpuLayer& l) const override;
#endif
};

const Op& relu_op();
const Op& add_op();

}  // namespace convoy

#if CONVOY_HAVE_CUDA
namespace convoy::gpu {

class Context;

template <typename T>
void relu_forward(Context& ctx, size_t count, const T* x, T* y);
template <typename T>
void relu_backward(Context& ctx, size_t count, const T* y, const T* dy, T* dx);
template <typename T>
void add_forward(Context& ctx, size_t count, const T* a, const T* b, T* y);
template <typename T>
void accumulate(Context& ctx, size_t count, const T* src, T* dst);
// y = max(0, a + b): a residual add and the ReLU after it in one pass. Its backward pass sends the
// ReLU's input gradient (y > 0 ? dy : 0) to both inputs' gradients da and db, each written or, with
// acc_*, added to (as accumulate); a null one is left out. Bit for bit the separate ops' results.
template <typename T>
void add_relu_forward(Context& ctx, size_t count, const T* a, const T* b, T* y);
// y = a + b over [rows, c] NHWC (with relu, max(0, a + b)) where a or b, or both, may be left as
// a ChannelAffine: the same bits as their own pass and then add_forward or add_relu_forward.
// relu_bits (whole 16-byte packs): where the ReLU's output signs go, a byte per pack (storage.cuh's
// positive_bits), for the backward passes to read instead of y.
void add_affine_forward(Context& ctx, size_t count, int c, const ChannelAffine& a, const ChannelAffine& b, bf16* y,
                        bool relu, uint8_t* relu_bits = nullptr);
// With dy2, the ReLU's output gradient came in two parts (two consumers, each written apart):
// dy + dy2, rounded once, is taken as it.
template <typename T>
void add_relu_backward(Context& ctx, size_t count, const T* y, const T* dy, T* da, bool acc_a, T* db, bool acc_b,
                       const T* dy2 = nullptr, const uint8_t* relu_bits = nullptr);

// The same pass for an add that writes the gradient once, to d (rows x c NHWC, c a whole number
// of 16-byte packs), while a and b (a null part: not taken) collect the gradient sums of the
// deferred batch norms it reaches (BnGradSums), which their backward passes then only finish.
void add_relu_backward_sums(Context& ctx, long long rows, int c, const bf16* y, const bf16* dy, const bf16* dy2,
                            bf16* d, const BnGradSums& a, const BnGradSums& b, const uint8_t* relu_bits = nullptr);

}  // namespace convoy::gpu
#endif
