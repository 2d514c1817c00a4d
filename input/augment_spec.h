// What augmentation a loader applies (a config's [data] section, the Python module's arguments,
// bench-loader's flags), and the one set of rules on it: each range, and the options that need or
// exclude another.
#pragma once
#include <string>

#include "input/progressive_resize.h"

namespace convoy {

struct AugmentSpec {
  int crop = 0;       // output side in pixels; 0 = the stored size
  int pad = 0;        // zero padding around the stored image before a random crop
  bool flip = false;  // random horizontal flip
  // Training: torchvision's RandomResizedCrop (area fraction in `scale`, aspect ratio w/h in
  // `ratio`, log-uniform) resized to crop x crop, instead of a crop x crop window.
  bool random_resized_crop = false;
  double scale[2] = {0.08, 1.0};
  double ratio[2] = {3.0 / 4.0, 4.0 / 3.0};
  // Evaluation: the short side to `eval_resize`, then the centred crop x crop (torchvision's
  // Resize(256) + CenterCrop(224)); 0 = the centred crop x crop of the stored image.
  int eval_resize = 0;
  // Training: crops of each epoch's side (progressive_resize.h) rather than of `crop`, which stays
  // the net's input and the evaluation's size.
  ProgressiveResize progressive;
};

// The side of epoch `epoch`'s training crops: progressive's, or crop (0: the stored size).
int train_crop(const AugmentSpec& a, int epoch);

// The ranges of AugmentSpec's numbers, which a config's [data] keys are read against too.
constexpr int kMaxCrop = 1 << 16, kMaxPad = 1 << 10, kMaxEvalResize = 1 << 16;
constexpr double kScaleRange[2] = {1e-6, 1}, kRatioRange[2] = {1e-3, 1e3};

// "" if `a` means something, else its first problem in one line, naming the option as the config
// and the Python module do (crop, pad, scale, ratio, eval_resize, random_resized_crop, progressive).
std::string augment_problem(const AugmentSpec& a);

}  // namespace convoy
