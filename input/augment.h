// One sample from stored uint8 HWC pixels to the net's input: a region of the image (a random
// window, torchvision's RandomResizedCrop, or the centred evaluation crop), resized to the output
// size when it differs from it (render), then optionally mirrored and (x - mean) / std (normalize).
#pragma once
#include <cstdint>
#include <vector>

#include "input/augment_spec.h"
#include "input/sample_format.h"
#include "shared/batch_file.h"
#include "shared/jpeg_region.h"

namespace convoy {

// A region of the stored image, in its pixel coordinates. A region of the output's size is copied
// and may reach into the zero padding around the image; any other is resized to the output size.
struct SampleCrop {
  int top = 0, left = 0, height = 0, width = 0;
  bool flip = false;
};

struct Augmenter {
  ImageShape stored;
  AugmentSpec spec;
  bool train = true;
  int out_h = 0, out_w = 0;
  std::vector<float> scale, shift;  // per channel: 1/std and -mean/std

  // Output size = spec.crop (or the stored size when it is 0); errors if a window of it does not fit.
  // Evaluation (train false) takes the centred crop, with no padding or flip.
  Augmenter(ImageShape stored, const AugmentSpec& spec, bool train, const std::vector<double>& mean,
            const std::vector<double>& std);

  size_t out_bytes() const { return size_t(out_h) * size_t(out_w) * stored.channels; }
  // What a raw batch's consumer needs to know of each sample (the CUDA backend normalises them).
  SampleFormat format() const { return SampleFormat{int(stored.channels), out_h, out_w, scale, shift}; }
  // The region and flip of one sample: drawn from (key, sample id) in training, centred otherwise.
  SampleCrop choose(uint64_t key, int64_t id) const;
  bool resizes(const SampleCrop& c) const { return c.height != out_h || c.width != out_w; }
  // The JPEG decode's scale, 1, 2, 4 or 8: the largest that leaves the region at least the output's
  // size, so a region twice the output or more is decoded smaller in the DCT domain.
  int dct_scale(const SampleCrop& c) const;
  // The part of the image, decoded at 1/scale, that the region needs (empty if it lies wholly in
  // the padding).
  PixelRect source_rect(const SampleCrop& c, int scale) const;
  // The output's out_h x out_w x C pixels, not yet mirrored, from `v`, which holds at least
  // source_rect(c, scale).
  void render(const PixelView& v, const SampleCrop& c, int scale, uint8_t* out) const;
  // Mirrors render's output in place, for a consumer that does not normalise it (normalize mirrors
  // for free as it reads).
  void mirror(uint8_t* hwc) const;
  // render's out_h x out_w x C uint8, mirrored if `flip`, to a normalised float CHW tensor.
  void normalize(const uint8_t* hwc, bool flip, float* chw) const;
};

}  // namespace convoy
