// Augmentation option rules: each range, then the options that need or exclude another.
#include "input/augment_spec.h"

#include <sstream>

namespace convoy {
namespace {

std::string out_of(const char* name, double v, double lo, double hi) {
  std::ostringstream s;
  s << name << " must be in [" << lo << ", " << hi << "], not " << v;
  return s.str();
}

std::string bad_pair(const char* name, const double v[2], const double range[2]) {
  const double lo = range[0], hi = range[1];
  if (lo <= v[0] && v[0] <= v[1] && v[1] <= hi) return "";
  std::ostringstream s;
  s << name << " must be (low, high) with " << lo << " <= low <= high <= " << hi << ", not (" << v[0] << ", " << v[1]
    << ")";
  return s.str();
}

}  // namespace

std::string augment_problem(const AugmentSpec& a) {
  if (a.crop < 0 || a.crop > kMaxCrop) return out_of("crop", a.crop, 0, kMaxCrop);
  if (a.pad < 0 || a.pad > kMaxPad) return out_of("pad", a.pad, 0, kMaxPad);
  if (a.eval_resize < 0 || a.eval_resize > kMaxEvalResize)
    return out_of("eval_resize", a.eval_resize, 0, kMaxEvalResize);
  if (std::string p = bad_pair("scale", a.scale, kScaleRange); !p.empty()) return p;
  if (std::string p = bad_pair("ratio", a.ratio, kRatioRange); !p.empty()) return p;
  if ((a.random_resized_crop || a.eval_resize) && a.crop == 0)
    return "random_resized_crop and eval_resize need crop (the output side)";
  if (a.random_resized_crop && a.pad) return "random_resized_crop takes no pad";
  if (a.eval_resize && a.eval_resize < a.crop)
    return "eval_resize " + std::to_string(a.eval_resize) + " must be at least crop (" + std::to_string(a.crop) + ")";
  return progressive_problem(a.progressive, a.crop, a.random_resized_crop);
}

int train_crop(const AugmentSpec& a, int epoch) {
  return a.progressive.on() ? resolution_at(a.progressive, epoch) : a.crop;
}

}  // namespace convoy
