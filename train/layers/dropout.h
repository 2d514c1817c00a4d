// The dropout op (`type = "dropout"`), inverted dropout with a counter-based mask: element i of
// sample s is kept or dropped by a hash of (key, sample_keys[s], i), so the mask does not depend on
// thread count, rank or device, and the CUDA twin (dropout.cu) draws the same mask.
#pragma once
#include <cstddef>
#include <cstdint>

#include "shared/counter_rng.h"
#include "train/layers/op.h"

#if CONVOY_HAVE_CUDA
#include "train/cuda/storage.h"
#endif

namespace convoy {

struct DropoutShape {
  int n = 0;
  size_t per_sample = 0;
  float p = 0.5f;  // probability of dropping
};

// mask[i] is 0 or 1 / (1 - p); y = x * mask.
void dropout_forward(const DropoutShape& s, uint64_t key, const uint64_t* sample_keys, const float* x, float* y,
                     float* mask);
void dropout_backward(const DropoutShape& s, const float* mask, const float* dy, float* dx);

struct DropoutParams : OpParams {
  float p = 0.5f;
};

// The net's dropout layers draw their masks from the step's key salted with the node's index, so
// no two layers drop alike and both backends drop the same elements.
inline uint64_t dropout_salt(int index) { return uint64_t(index) * 0x100000001B3ull; }

class DropoutOp final : public Op {
 public:
  const char* type() const override { return "dropout"; }
  std::vector<std::string> keys() const override { return {"p"}; }
  std::shared_ptr<const OpParams> parse(const LayerKeys& k) const override;
  std::string example() const override { return "p = 0.5\n"; }
  OpShape shape(const ShapeIn& in) const override;
  CpuBuffers cpu_buffers(const Node& nd, int n) const override;
  double forward(const CpuLayer& l) const override;
  void backward(const CpuLayer& l, int k) const override;
#if CONVOY_HAVE_CUDA
  void gpu_setup(gpu::GpuSetup& s) const override;
  void gpu_forward(const gpu::GpuLayer& l) const override;
  void gpu_backward(const gpu::GpuLayer& l, int k) const override;
#endif
};
const Op& dropout_op();

}  // namespace convoy

#if CONVOY_HAVE_CUDA
namespace convoy::gpu {

class Context;

// key: device pointer to the step's key, xor-ed with the layer's salt as the CPU twin does;
// sample_keys is a device array of s.n keys; the mask equals the CPU twin's bit for bit (for bf16,
// the kept value 1 / (1 - p) rounded to bf16; products use it unrounded). Element i is the i-th as
// stored: in a bf16 net's NHWC tensor of more than one pixel, another element than the CPU's i-th.
template <typename T>
void dropout_forward(Context& ctx, const DropoutShape& s, const uint64_t* key, uint64_t salt,
                     const uint64_t* sample_keys, const T* x, T* y, T* mask);
template <typename T>
void dropout_backward(Context& ctx, const DropoutShape& s, const T* mask, const T* dy, T* dx);

}  // namespace convoy::gpu
#endif
