// Augmentation on the CPU (the reader threads run it); the CUDA backend repeats it on the GPU
// from the same CropFlip choices.
#include "train/augment.h"

#include "shared/error.h"
#include "train/layers/dropout.h"

namespace convoy {

Augmenter::Augmenter(ImageShape s, int crop, int pad_, bool flip, const std::vector<double>& mean,
                     const std::vector<double>& std)
    : stored(s), out_h(crop ? crop : int(s.height)), out_w(crop ? crop : int(s.width)), pad(pad_),
      random_flip(flip) {
  if (out_h > int(s.height) + 2 * pad || out_w > int(s.width) + 2 * pad)
    fail("crop " + std::to_string(crop) + " does not fit the stored " + std::to_string(s.height) +
         "x" + std::to_string(s.width) + " images");
  if (mean.size() != s.channels || std.size() != s.channels)
    fail("dataset.json: mean/std need one value per channel (" + std::to_string(s.channels) + ")");
  for (uint32_t c = 0; c < s.channels; ++c) {
    const double sd = std[c] > 1e-6 ? std[c] : 1.0;
    scale.push_back(float(1.0 / sd));
    shift.push_back(float(-mean[c] / sd));
  }
}

CropFlip Augmenter::choose(bool train, uint64_t key, int64_t id) const {
  CropFlip cf;
  const int room_h = int(stored.height) + 2 * pad - out_h, room_w = int(stored.width) + 2 * pad - out_w;
  if (!train) {
    cf.top = pad + (int(stored.height) - out_h) / 2;
    cf.left = pad + (int(stored.width) - out_w) / 2;
    return cf;
  }
  cf.top = int(counter_uniform(key, uint64_t(id), 1) * float(room_h + 1));
  cf.left = int(counter_uniform(key, uint64_t(id), 2) * float(room_w + 1));
  cf.top = std::min(cf.top, room_h);
  cf.left = std::min(cf.left, room_w);
  cf.flip = random_flip && counter_uniform(key, uint64_t(id), 3) < 0.5f;
  return cf;
}

void Augmenter::apply(const uint8_t* hwc, const CropFlip& cf, float* chw) const {
  const int H = int(stored.height), W = int(stored.width), C = int(stored.channels);
  for (int c = 0; c < C; ++c) {
    float* plane = chw + size_t(c) * out_h * out_w;
    for (int y = 0; y < out_h; ++y) {
      const int sy = cf.top + y - pad;
      float* row = plane + size_t(y) * out_w;
      for (int x = 0; x < out_w; ++x) {
        const int sx = cf.left + (cf.flip ? out_w - 1 - x : x) - pad;
        const float v = (sy >= 0 && sy < H && sx >= 0 && sx < W) ? float(hwc[(size_t(sy) * W + sx) * C + c]) : 0.f;
        row[x] = v * scale[c] + shift[c];
      }
    }
  }
}

}  // namespace convoy
