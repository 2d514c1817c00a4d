// The CPU reference of the weights' moving average; optimizer_update.cu's average_update is its
// CUDA twin over the same flat buffers.
#include "train/weight_average.h"

namespace convoy {

void average_into(size_t n, float* avg, const float* x, double decay) {
  const float d = float(decay), rest = float(1 - decay);
  for (size_t i = 0; i < n; ++i) avg[i] = averaged(avg[i], x[i], d, rest);
}

void WeightAverage::update(Net& net) {
  average_into(weights.size(), weights.data(), net.weights().data(), decay);
  average_into(state.size(), state.data(), net.state().data(), decay);
}

void WeightAverage::swap_with(Net& net) {
  weights.swap(net.weights());
  state.swap(net.state());
}

}  // namespace convoy
