// libFuzzer target: arbitrary bytes as a checkpoint, read the way train --resume and train eval read
// one: header, sizes and CRC32C, the JSON metadata and its record of the training data, then the net
// rebuilt from the config text it holds.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "shared/crc32c.h"
#include "shared/error.h"
#include "train/checkpoint.h"
#include "train/net.h"
#include "train/net_config.h"
#include "train/run_spec.h"

namespace {

// As in fuzz_net_config: Net refuses larger nets itself, before the fuzzer's memory limit would.
constexpr size_t kMaxParams = size_t(1) << 22;

void read(const std::string& bytes) {
  try {
    const convoy::Checkpoint c = convoy::parse_checkpoint(bytes, "fuzz.ckpt");
    try {
      convoy::trained_on(c, "fuzz.ckpt");  // what a resume and an evaluation check their inputs against
    } catch (const convoy::Error&) {
    }
    convoy::NetConfig cfg;
    try {
      cfg = convoy::parse_net_config(c.info.at("config_text").get<std::string>(),
                                     c.info.at("config_path").get<std::string>());
    } catch (const nlohmann::json::exception&) {
      return;  // train turns these into one line naming the checkpoint
    }
    const convoy::Dims in = cfg.input_c > 0 ? convoy::Dims{cfg.input_c, cfg.input_h, cfg.input_w}
                                            : convoy::Dims{1, 8, 8};
    convoy::Net net(cfg, in, cfg.classes, kMaxParams);
    if (c.weights.size() == net.weights().size() && c.state.size() == net.state().size()) {
      net.weights() = c.weights;
      net.state() = c.state;
    }
  } catch (const convoy::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  read(bytes);
  // Again with the CRC32C made right, or almost every mutation would stop at the checksum.
  if (size >= 4) {
    const uint32_t crc = convoy::crc32c(bytes.data(), size - 4);
    std::memcpy(&bytes[size - 4], &crc, 4);
    read(bytes);
  }
  return 0;
}
