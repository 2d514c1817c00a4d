// The one random number generator of every stage, on the host and the device: splitmix64's
// finaliser over counters, so any split of the work over threads, ranks or the GPU draws the same.
#pragma once
#include <cstdint>

#include "shared/host_device.h"

namespace convoy {

// splitmix64's output function of state z + golden gamma: a 64-bit mix with full avalanche.
CONVOY_HD uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// splitmix64 as a sequence: the next value, advancing `state`.
CONVOY_HD uint64_t splitmix64(uint64_t& state) {
  const uint64_t z = mix64(state);
  state += 0x9E3779B97F4A7C15ull;
  return z;
}

// A uniform float in [0, 1) from a key and two counters (24 bits of the mix).
CONVOY_HD float counter_uniform(uint64_t key, uint64_t a, uint64_t b) {
  const uint64_t h = mix64(mix64(mix64(key) ^ a) ^ b);
  return float(h >> 40) * (1.0f / 16777216.0f);
}

// The keys, one per use, so that no two uses of the same seed draw alike.
// Dropout masks of one training step (with the sample's key and the element as counters).
inline uint64_t dropout_step_key(uint64_t seed, long long global_step) {
  return seed * 0xA24BAED4963EE407ull + uint64_t(global_step) * 0x9FB21C651E98DF25ull + 11;
}
// Crops and flips of one epoch (with the sample's dataset id and the draw as counters).
inline uint64_t augment_epoch_key(uint64_t seed, int epoch) {
  return seed * 0xD1B54A32D192ED03ull + uint64_t(epoch) * 0x9E3779B97F4A7C15ull + 7;
}
// The order of batch files and samples in one epoch.
inline uint64_t order_epoch_key(uint64_t seed, int epoch) { return seed * 0x9E3779B97F4A7C15ull + uint64_t(epoch) + 1; }

}  // namespace convoy
