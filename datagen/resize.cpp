// The CPU resize: crop or squash, then cv::resize straight into the sample's slot.
#include "datagen/resize.h"

#include <algorithm>
#include <opencv2/imgproc.hpp>

#include "shared/error.h"

namespace convoy::datagen {

ResizePolicy parse_resize_policy(const std::string& name) {
  if (name == "crop") return ResizePolicy::crop;
  if (name == "squash") return ResizePolicy::squash;
  if (name == "short") return ResizePolicy::short_side;
  fail("--resize must be crop, squash or short, not '" + name + "'");
}

const char* resize_policy_name(ResizePolicy p) {
  switch (p) {
    case ResizePolicy::crop: return "crop";
    case ResizePolicy::squash: return "squash";
    case ResizePolicy::short_side: return "short";
  }
  return "?";
}

void resize_to_square(const cv::Mat& src, int size, ResizePolicy policy, uint8_t* dst) {
  if (policy == ResizePolicy::short_side) fail("--resize short gives variable sizes and cannot fill a raw batch file");
  cv::Mat region = src;
  if (policy == ResizePolicy::crop) {
    const int side = std::min(src.cols, src.rows);
    region = src(cv::Rect((src.cols - side) / 2, (src.rows - side) / 2, side, side));
  }
  cv::Mat out(size, size, src.type(), dst);
  if (region.cols == size && region.rows == size) {
    region.copyTo(out);
    return;
  }
  const bool shrink = region.cols >= size && region.rows >= size;
  cv::resize(region, out, cv::Size(size, size), 0, 0, shrink ? cv::INTER_AREA : cv::INTER_LINEAR);
  if (out.data != dst) fail("internal: resize did not write into the sample buffer");
}

}  // namespace convoy::datagen
