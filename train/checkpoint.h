// Checkpoints: everything needed to continue a run exactly (weights, running statistics,
// optimiser state, loader position and RNG counters, the config text) in one file written
// atomically and covered by a CRC32C, refused with a clear message if damaged.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace convoy {

struct Checkpoint {
  nlohmann::json info;  // what the run was made from (run_spec.h's run_record), epoch, step, optimiser step, sums
  std::vector<float> weights, state, m, v;
  // [train] ema: the moving average of weights and state (empty without one).
  std::vector<float> avg_weights, avg_state;
};

void write_checkpoint(const std::string& path, const Checkpoint& c);
Checkpoint read_checkpoint(const std::string& path);
// The same from the file's bytes; `path` names it in messages.
Checkpoint parse_checkpoint(const std::string& bytes, const std::string& path);

}  // namespace convoy
