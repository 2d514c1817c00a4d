// Augmentation on the CPU (the reader threads run it); the CUDA backend repeats it on the GPU
// from the same CropFlip choices.
#include "train/augment.h"

#include <algorithm>

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
  // Output column x reads source column sx = x + dx, or dx - x when flipped: the columns that
  // land inside the image form one run [x_lo, x_hi), so the loop over it needs no bounds checks.
  const int dx = cf.flip ? cf.left + out_w - 1 - pad : cf.left - pad;
  int x_lo = cf.flip ? dx - W + 1 : -dx, x_hi = cf.flip ? dx + 1 : W - dx;
  x_lo = std::max(0, std::min(out_w, x_lo));
  x_hi = std::max(x_lo, std::min(out_w, x_hi));
  for (int c = 0; c < C; ++c) {
    float* plane = chw + size_t(c) * out_h * out_w;
    const float s = scale[c], t = shift[c];
    const float outside = 0.f * s + t;  // the padding is a zero pixel, normalised like any other
    for (int y = 0; y < out_h; ++y) {
      const int sy = cf.top + y - pad;
      float* row = plane + size_t(y) * out_w;
      if (sy < 0 || sy >= H) {
        std::fill(row, row + out_w, outside);
        continue;
      }
      std::fill(row, row + x_lo, outside);
      std::fill(row + x_hi, row + out_w, outside);
      const uint8_t* src = hwc + size_t(sy) * W * C + c;
      if (cf.flip) {
        for (int x = x_lo; x < x_hi; ++x) row[x] = float(src[(dx - x) * C]) * s + t;
      } else {
        for (int x = x_lo; x < x_hi; ++x) row[x] = float(src[(x + dx) * C]) * s + t;
      }
    }
  }
}

}  // namespace convoy
