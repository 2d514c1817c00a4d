// libFuzzer target: arbitrary bytes as a net config (TOML -> NetConfig), the net built from it for a
// few input shapes, and the small ones run forward and backward on two images.
#include <cblas.h>
#include <omp.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "shared/error.h"
#include "train/net.h"
#include "train/net_config.h"

namespace {

// Far below Net's own limit (2^31 - 1), so that a legitimately large net is refused by Net, one
// line, before libFuzzer's memory limit would count its weights as a finding.
constexpr size_t kMaxParams = size_t(1) << 22;
// Forward and backward are what uses the shapes Net accepted; bounded so that a run stays at a
// few milliseconds under the sanitizers.
constexpr double kRunFlops = 2e6;
constexpr size_t kRunValues = 100000;

void build_and_run(const convoy::NetConfig& cfg, convoy::Dims in, int classes) {
  try {
    convoy::Net net(cfg, in, classes, kMaxParams);
    // Every net Net accepts ends in a loss over at least one class.
    if (net.classes() < 1) __builtin_trap();
    size_t values = in.size();
    for (const convoy::Node& nd : net.nodes()) values += nd.out.size();
    if (net.flops_per_image() > kRunFlops || values > kRunValues) return;
    const int n = 2;
    net.init_weights(1);
    std::vector<float> x(n * in.size());
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i % 17) - 8) / 8;
    const int32_t labels[n] = {0, 1 % net.classes()};
    const uint64_t keys[n] = {11, 12};
    net.forward(n, x.data(), labels, true, 5, keys);
    net.backward(true);
    net.forward(n, x.data(), labels, false);
  } catch (const convoy::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // One thread: the fuzzer's time goes to more inputs, and nothing is left running between them.
  omp_set_num_threads(1);
  openblas_set_num_threads(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  convoy::NetConfig cfg;
  try {
    cfg = convoy::parse_net_config(std::string(reinterpret_cast<const char*>(data), size), "fuzz.toml");
  } catch (const convoy::Error&) {
    return 0;
  }
  // The shapes train builds a net for: the config's own [net] input (--print-net), and a dataset's
  // images, cropped to [data] crop when it is set.
  const int classes = cfg.classes > 0 ? cfg.classes : 10;
  if (cfg.input_c > 0) build_and_run(cfg, {cfg.input_c, cfg.input_h, cfg.input_w}, cfg.classes);
  const int crop = cfg.augment.crop;
  if (crop) {
    build_and_run(cfg, {1, crop, crop}, classes);
    build_and_run(cfg, {3, crop, crop}, classes);
  } else {
    for (const convoy::Dims in : {convoy::Dims{1, 28, 28}, convoy::Dims{3, 32, 32}, convoy::Dims{3, 64, 64}})
      build_and_run(cfg, in, classes);
  }
  return 0;
}
