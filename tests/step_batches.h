// Random raw batches for the CUDA step's tests: a shipped config's net with seeded weights and
// batches of random pixels rendered through its augmentation, as the loader hands them over.
#pragma once
#include <random>
#include <string>
#include <vector>

#include "input/augment.h"
#include "input/loader.h"
#include "source_dir.h"
#include "train/net.h"
#include "train/net_config.h"

namespace convoy::test {

// fmnist's augmentation: the stored size, shifted by up to 2 pixels, flipped.
inline AugmentSpec spec() {
  AugmentSpec a;
  a.pad = 2, a.flip = true;
  return a;
}

// count batches of n samples; seed picks the pixels and labels (the net's weights are the same for any).
struct Batches {
  NetConfig cfg;
  ImageShape stored;
  Augmenter aug;
  Net net;
  std::vector<HostBatch> batches;

  Batches(int n, int count, const std::string& config = "fmnist.toml", ImageShape shape = {28, 28, 1},
          unsigned seed = 4)
      : cfg(read_net_config(test::config_path(config))), stored(shape),
        aug(stored, spec(), true, std::vector<double>(shape.channels, 72.9), std::vector<double>(shape.channels, 90.0)),
        net(cfg, Dims{int(shape.channels), int(shape.height), int(shape.width)}, 10) {
    net.init_weights(11);
    std::mt19937 rng(seed);
    for (int b = 0; b < count; ++b) {
      HostBatch hb;
      hb.n = n;
      hb.pixels.resize(size_t(n) * aug.out_bytes());
      std::vector<uint8_t> image(stored.bytes());
      const PixelView whole{image.data(), size_t(stored.width) * stored.channels, int(stored.channels),
                            PixelRect{0, 0, int(stored.width), int(stored.height)}};
      for (int i = 0; i < n; ++i) {
        for (auto& p : image) p = uint8_t(rng() % 256);
        const SampleCrop c = aug.choose(77 + b, i);
        aug.render(whole, c, 1, hb.pixels.data() + i * aug.out_bytes());
        hb.flips.push_back(c.flip);
        hb.labels.push_back(int32_t(rng() % 10));
        hb.keys.push_back(uint64_t(1000 * b + i));
      }
      batches.push_back(std::move(hb));
    }
  }
};

}  // namespace convoy::test
