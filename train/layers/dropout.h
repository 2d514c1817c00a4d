// Inverted dropout with a counter-based mask: element i of sample s is kept or dropped by a hash
// of (key, sample_keys[s], i), so the mask does not depend on thread count, rank or device, and
// the CUDA twin (dropout.cu) draws the same mask.
#pragma once
#include <cstddef>
#include <cstdint>

#include "shared/counter_rng.h"

namespace convoy {

struct DropoutShape {
  int n = 0;
  size_t per_sample = 0;
  float p = 0.5f;  // probability of dropping
};


// mask[i] is 0 or 1 / (1 - p); y = x * mask.
void dropout_forward(const DropoutShape& s, uint64_t key, const uint64_t* sample_keys,
                     const float* x, float* y, float* mask);
void dropout_backward(const DropoutShape& s, const float* mask, const float* dy, float* dx);

}  // namespace convoy
