// One sample from stored uint8 HWC pixels to a normalised float CHW tensor: crop (random with
// zero padding in training, centred in evaluation), optional horizontal flip, (x - mean) / std.
#pragma once
#include <cstdint>
#include <vector>

#include "shared/batch_file.h"

namespace convoy {

struct CropFlip {
  int top = 0, left = 0;  // in padded-image coordinates
  bool flip = false;
};

struct Augmenter {
  ImageShape stored;
  int out_h = 0, out_w = 0, pad = 0;
  bool random_flip = false;
  std::vector<float> scale, shift;  // per channel: 1/std and -mean/std

  // Output size = crop (or the stored size when crop is 0); errors if it does not fit.
  Augmenter(ImageShape stored, int crop, int pad, bool flip, const std::vector<double>& mean,
            const std::vector<double>& std);
  // The crop and flip of one sample: drawn from (key, sample id) in training, centred otherwise.
  CropFlip choose(bool train, uint64_t key, int64_t id) const;
  void apply(const uint8_t* hwc, const CropFlip& cf, float* chw) const;
};

}  // namespace convoy
