// The training crop's side by epoch, as FFCV's get_resolution computes it, and the rules on the
// four keys that give it.
#include "input/progressive_resize.h"

#include <algorithm>
#include <cmath>

namespace convoy {

int resolution_at(const ProgressiveResize& p, int epoch) {
  if (epoch <= p.start_ramp) return p.min_res;
  if (epoch >= p.end_ramp) return p.max_res;
  // np.interp's arithmetic, in double as numpy does it: slope times the distance, plus the start.
  const double slope = double(p.max_res - p.min_res) / double(p.end_ramp - p.start_ramp);
  const double side = slope * double(epoch - p.start_ramp) + double(p.min_res);
  // np.round rounds halves to even, as nearbyint does in the default rounding mode (FE_TONEAREST);
  // std::round would round them away from zero and give 224 where FFCV gives 192 (6.5 x 32).
  return int(std::nearbyint(side / kProgressiveStep)) * kProgressiveStep;
}

std::vector<int> resolutions(const ProgressiveResize& p) {
  std::vector<int> sides{p.min_res};
  for (int s = (p.min_res / kProgressiveStep + 1) * kProgressiveStep; s < p.max_res; s += kProgressiveStep)
    sides.push_back(s);
  if (p.max_res != p.min_res) sides.push_back(p.max_res);
  return sides;
}

int largest_epoch(const ProgressiveResize& p, int epochs) { return std::min(p.end_ramp, std::max(0, epochs - 1)); }

std::string progressive_problem(const ProgressiveResize& p, int crop, bool random_resized_crop) {
  if (!p.on()) return "";
  const auto side = [](int v) { return std::to_string(v); };
  for (const auto& [name, v] : {std::pair<const char*, int>{"min_res", p.min_res}, {"max_res", p.max_res}})
    if (v < kProgressiveStep || v % kProgressiveStep != 0)
      return std::string("progressive: ") + name + " " + side(v) + " must be a positive multiple of " +
             side(kProgressiveStep) + " (the ramp's sizes are, as FFCV's)";
  if (p.min_res > p.max_res) return "progressive: min_res " + side(p.min_res) + " is above max_res " + side(p.max_res);
  if (p.start_ramp < 0 || p.end_ramp > kMaxRampEpoch || p.start_ramp > p.end_ramp)
    return "progressive: start_ramp " + side(p.start_ramp) + " and end_ramp " + side(p.end_ramp) +
           " must be epochs with 0 <= start_ramp <= end_ramp <= " + side(kMaxRampEpoch);
  if (!random_resized_crop)
    return "progressive needs random_resized_crop = true (each epoch's crops are resized to its side)";
  if (p.max_res > crop)
    return "progressive: max_res " + side(p.max_res) + " is above crop " + side(crop) +
           " (the net's input, at which it evaluates)";
  return "";
}

}  // namespace convoy
