// Augmentation on the CPU, run by the loader's readers for both backends, so the CPU and the CUDA
// backend train on the same bytes; the flip and the normalisation happen in one pass at the end,
// on the GPU for the CUDA backend (train/cuda/normalize_input.cu), where mirroring costs nothing.
#include "input/augment.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "shared/counter_rng.h"
#include "shared/error.h"
#include "shared/resize.h"

namespace convoy {

void require_crop_for(const ImageShape& stored, const AugmentSpec& a) {
  if (stored.height == 0 && a.crop == 0)
    fail(
        "crop: the dataset holds whole images at their own sizes (batch-file format v2), so the output size "
        "must be set (crop = 224, say); there is no one stored size to default to");
}

Augmenter::Augmenter(ImageShape s, const AugmentSpec& a, bool train_, const std::vector<double>& mean,
                     const std::vector<double>& std)
    : stored(s), spec(a), train(train_), out_h(a.crop ? a.crop : int(s.height)), out_w(a.crop ? a.crop : int(s.width)) {
  if (!train) spec.pad = 0, spec.flip = false, spec.random_resized_crop = false;
  require_crop_for(s, a);
  const bool window = !(train ? spec.random_resized_crop : spec.eval_resize > 0);
  if (!varied() && window && (out_h > int(s.height) + 2 * spec.pad || out_w > int(s.width) + 2 * spec.pad))
    fail("crop " + std::to_string(a.crop) + " does not fit the stored " + std::to_string(s.height) + "x" +
         std::to_string(s.width) + " images");
  if (mean.size() != s.channels || std.size() != s.channels)
    fail("dataset.json: mean/std need one value per channel (" + std::to_string(s.channels) + ")");
  for (uint32_t c = 0; c < s.channels; ++c) {
    const double sd = std[c] > 1e-6 ? std[c] : 1.0;
    scale.push_back(float(1.0 / sd));
    shift.push_back(float(-mean[c] / sd));
  }
}

SampleCrop random_resized_region(const AugmentSpec& a, int H, int W, const std::function<double(int)>& u) {
  const double area = double(H) * double(W), lr0 = std::log(a.ratio[0]), lr1 = std::log(a.ratio[1]);
  for (int t = 0; t < 10; ++t) {
    const double target = area * (a.scale[0] + u(4 * t) * (a.scale[1] - a.scale[0]));
    const double ratio = std::exp(lr0 + u(4 * t + 1) * (lr1 - lr0));
    const int w = int(std::lround(std::sqrt(target * ratio))), h = int(std::lround(std::sqrt(target / ratio)));
    if (w > 0 && w <= W && h > 0 && h <= H) {
      SampleCrop c{0, 0, h, w, false};
      c.top = std::min(H - h, int(u(4 * t + 2) * double(H - h + 1)));
      c.left = std::min(W - w, int(u(4 * t + 3) * double(W - w + 1)));
      return c;
    }
  }
  const double in_ratio = double(W) / double(H);
  int w = W, h = H;
  if (in_ratio < a.ratio[0])
    h = int(std::lround(W / a.ratio[0]));
  else if (in_ratio > a.ratio[1])
    w = int(std::lround(H * a.ratio[1]));
  return SampleCrop{(H - h) / 2, (W - w) / 2, h, w, false};
}

namespace {

// Draws come from counters 16 to 55 of the sample's stream (choose's others use 1 to 3).
SampleCrop random_resized(const AugmentSpec& a, int H, int W, uint64_t key, int64_t id) {
  return random_resized_region(a, H, W, [&](int k) { return double(counter_uniform(key, uint64_t(id), 16 + k)); });
}

}  // namespace

SampleCrop Augmenter::choose(uint64_t key, int64_t id, ImageSize image) const {
  const int H = image.height, W = image.width;
  if (!train) {
    if (spec.eval_resize == 0) return SampleCrop{(H - out_h) / 2, (W - out_w) / 2, out_h, out_w, false};
    // The short side to eval_resize, then the centred crop: that crop's footprint on the image.
    const double f = double(std::min(H, W)) / double(spec.eval_resize);
    const int h = std::min(H, int(std::lround(out_h * f))), w = std::min(W, int(std::lround(out_w * f)));
    return SampleCrop{(H - h) / 2, (W - w) / 2, h, w, false};
  }
  SampleCrop c;
  if (spec.random_resized_crop) {
    c = random_resized(spec, H, W, key, id);
  } else {
    // An image smaller than the window (only where sizes vary) sits centred in it.
    const int pad = spec.pad, room_h = H + 2 * pad - out_h, room_w = W + 2 * pad - out_w;
    c.top = room_h < 0 ? (H - out_h) / 2
                       : std::min(room_h, int(counter_uniform(key, uint64_t(id), 1) * float(room_h + 1))) - pad;
    c.left = room_w < 0 ? (W - out_w) / 2
                        : std::min(room_w, int(counter_uniform(key, uint64_t(id), 2) * float(room_w + 1))) - pad;
    c.height = out_h, c.width = out_w;
  }
  c.flip = spec.flip && counter_uniform(key, uint64_t(id), 3) < 0.5f;
  return c;
}

int Augmenter::dct_scale(const SampleCrop& c) const {
  if (!resizes(c)) return 1;
  for (int s : {8, 4, 2})
    if (c.width >= s * out_w && c.height >= s * out_h) return s;
  return 1;
}

PixelRect Augmenter::source_rect(const SampleCrop& c, int s, ImageSize image) const {
  const int H = image.height, W = image.width;
  const int x0 = std::max(0, c.left), y0 = std::max(0, c.top);
  const int x1 = std::min(W, c.left + c.width), y1 = std::min(H, c.top + c.height);
  if (x1 <= x0 || y1 <= y0) return PixelRect{};
  // Outward to whole pixels of the scaled image.
  const int sx0 = x0 / s, sy0 = y0 / s, sx1 = scaled_length(x1, s), sy1 = scaled_length(y1, s);
  return PixelRect{sx0, sy0, sx1 - sx0, sy1 - sy0};
}

void Augmenter::render(const PixelView& v, const SampleCrop& c, int s, ImageSize image, uint8_t* out) const {
  const int C = int(stored.channels);
  const size_t row = size_t(out_w) * size_t(C);
  const PixelRect r = source_rect(c, s, image);
  auto at = [&](int y, int x) { return v.data + size_t(y - v.rect.y) * v.stride + size_t(x - v.rect.x) * size_t(C); };
  if (resizes(c)) {
    resize_to_square(PixelsIn{at(r.y, r.x), r.w, r.h, C, v.stride}, out_w, ResizePolicy::squash, out);
    return;
  }
  // A window: output column x shows image column left + x; the columns inside the image form one
  // run, the rest is padding.
  const int x_lo = std::clamp(r.x - c.left, 0, out_w), x_hi = std::clamp(x_lo + r.w, x_lo, out_w);
  for (int y = 0; y < out_h; ++y) {
    uint8_t* o = out + size_t(y) * row;
    const int sy = c.top + y;
    if (r.w == 0 || sy < r.y || sy >= r.y + r.h) {
      std::memset(o, 0, row);
      continue;
    }
    std::memset(o, 0, size_t(x_lo) * C);
    std::memset(o + size_t(x_hi) * C, 0, size_t(out_w - x_hi) * C);
    std::memcpy(o + size_t(x_lo) * C, at(sy, r.x), size_t(x_hi - x_lo) * C);
  }
}

void Augmenter::mirror(uint8_t* hwc) const {
  const size_t C = stored.channels;
  for (int y = 0; y < out_h; ++y) {
    uint8_t* row = hwc + size_t(y) * out_w * C;
    for (size_t a = 0, b = size_t(out_w) - 1; a < b; ++a, --b)
      for (size_t k = 0; k < C; ++k) std::swap(row[a * C + k], row[b * C + k]);
  }
}

void Augmenter::normalize(const uint8_t* hwc, bool flip, float* chw) const {
  const int C = int(stored.channels);
  for (int c = 0; c < C; ++c) {
    const float s = scale[c], t = shift[c];
    for (int y = 0; y < out_h; ++y) {
      float* p = chw + (size_t(c) * out_h + y) * out_w;
      const uint8_t* src = hwc + size_t(y) * out_w * C + c;
      if (flip)
        for (int x = 0; x < out_w; ++x) p[x] = float(src[size_t(out_w - 1 - x) * C]) * s + t;
      else
        for (int x = 0; x < out_w; ++x) p[x] = float(src[size_t(x) * C]) * s + t;
    }
  }
}

}  // namespace convoy
