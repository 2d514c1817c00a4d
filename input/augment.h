// One sample from stored uint8 HWC pixels to the net's input: a region of the image (a random
// window, torchvision's RandomResizedCrop, or the centred evaluation crop), resized to the output
// size when it differs from it (render), then optionally mirrored and (x - mean) / std (normalize).
#pragma once
#include <cstdint>
#include <functional>
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

// One stored image's size: the dataset's (format v1) or the sample's own (v2).
struct ImageSize {
  int height = 0, width = 0;
};

// torchvision's RandomResizedCrop.get_params on an H x W image: ten tries at a region of a random
// area fraction (uniform in spec.scale) and aspect ratio (log-uniform in spec.ratio), sides
// rounded, that fits, at a uniform position; else the whole image cut to the nearest allowed
// ratio, centred. draw(k) is the k-th uniform number in [0, 1): per try t, 4t + 0 area, 4t + 1
// ratio, 4t + 2 top, 4t + 3 left.
SampleCrop random_resized_region(const AugmentSpec& spec, int H, int W, const std::function<double(int)>& draw);

// Whole images at their own sizes (`stored` 0 x 0 x C, batch-file format v2) need spec.crop set:
// throws the one line naming `crop` where it is 0.
void require_crop_for(const ImageShape& stored, const AugmentSpec& spec);

struct Augmenter {
  ImageShape stored;  // whole images at their own sizes (batch-file format v2): height and width 0
  AugmentSpec spec;
  bool train = true;
  int out_h = 0, out_w = 0;
  std::vector<float> scale, shift;  // per channel: 1/std and -mean/std

  // Output size = spec.crop (or the stored size when it is 0); errors if a window of it does not fit.
  // Evaluation (train false) takes the centred crop, with no padding or flip. Where the stored
  // sizes vary, crop must be set (the error names it), and a window larger than an image reaches
  // into the zero padding around it, centred.
  Augmenter(ImageShape stored, const AugmentSpec& spec, bool train, const std::vector<double>& mean,
            const std::vector<double>& std);

  size_t out_bytes() const { return size_t(out_h) * size_t(out_w) * stored.channels; }
  // What a raw batch's consumer needs to know of each sample (the CUDA backend normalises them).
  SampleFormat format() const { return SampleFormat{int(stored.channels), out_h, out_w, scale, shift}; }
  bool varied() const { return stored.height == 0; }
  ImageSize stored_size() const { return {int(stored.height), int(stored.width)}; }
  // The region and flip of one sample of `image`'s size: drawn from (key, sample id) in
  // training, centred otherwise.
  SampleCrop choose(uint64_t key, int64_t id, ImageSize image) const;
  SampleCrop choose(uint64_t key, int64_t id) const { return choose(key, id, stored_size()); }
  bool resizes(const SampleCrop& c) const { return c.height != out_h || c.width != out_w; }
  // The JPEG decode's scale, 1, 2, 4 or 8: the largest that leaves the region at least the output's
  // size, so a region twice the output or more is decoded smaller in the DCT domain.
  int dct_scale(const SampleCrop& c) const;
  // The part of an image of `image`'s size, decoded at 1/scale, that the region needs (empty if it
  // lies wholly in the padding).
  PixelRect source_rect(const SampleCrop& c, int scale, ImageSize image) const;
  PixelRect source_rect(const SampleCrop& c, int scale) const { return source_rect(c, scale, stored_size()); }
  // The output's out_h x out_w x C pixels, not yet mirrored, from `v`, which holds at least
  // source_rect(c, scale, image).
  void render(const PixelView& v, const SampleCrop& c, int scale, ImageSize image, uint8_t* out) const;
  void render(const PixelView& v, const SampleCrop& c, int scale, uint8_t* out) const {
    render(v, c, scale, stored_size(), out);
  }
  // Mirrors render's output in place, for a consumer that does not normalise it (normalize mirrors
  // for free as it reads).
  void mirror(uint8_t* hwc) const;
  // render's out_h x out_w x C uint8, mirrored if `flip`, to a normalised float CHW tensor.
  void normalize(const uint8_t* hwc, bool flip, float* chw) const;
};

}  // namespace convoy
