// A tensor left as x * scale + shift per channel by the node that made it (batch norm), for its
// only consumer to apply as it reads x, so that the tensor never crosses memory on its own.
#pragma once
#include <vector_types.h>

#include "train/cuda/storage.h"

namespace convoy::gpu {

// Applied as the making node's own pass would store it, rounded to bf16, so the consumer's result
// is the same bit for bit. Without scale_shift, x is the tensor as it is.
struct ChannelAffine {
  const bf16* x = nullptr;
  const float2* scale_shift = nullptr;  // per channel
};

}  // namespace convoy::gpu
