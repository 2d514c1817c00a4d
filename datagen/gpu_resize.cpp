// Host side of --gpu-resize that every build has: planning each image the way resize.cpp and
// cv::resize do, and, in the CPU-only build, a GpuResizer that says clearly that CUDA is missing.
#include "datagen/gpu_resize.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <string>

#include "datagen/resize.h"
#include "shared/error.h"

namespace convoy::datagen {

namespace {
constexpr const char* kNoCudaBuild =
    "--gpu-resize: this datagen was built without CUDA (configure with nvcc present to get it)";
}  // namespace

ResizeJob plan_resize_job(int width, int height, int channels, size_t row_stride, int size,
                          ResizePolicy policy) {
  if (policy == ResizePolicy::short_side)
    fail("--resize short gives variable sizes and cannot fill a raw batch file");
  if (size <= 0) fail("resize: the sample size must be positive, not " + std::to_string(size));
  if (width <= 0 || height <= 0) fail("resize: empty image");
  if (channels < 1 || channels > 4) fail("resize: " + std::to_string(channels) + " channels");
  if (row_stride < static_cast<size_t>(width) * channels) fail("resize: row stride shorter than a row");

  ResizeJob j{};
  j.channels = channels;
  j.src_stride = static_cast<int32_t>(row_stride);
  j.src_w = width;
  j.src_h = height;
  if (policy == ResizePolicy::crop) {
    const int side = std::min(width, height);
    j.src_offset = static_cast<uint64_t>((height - side) / 2) * row_stride +
                   static_cast<uint64_t>((width - side) / 2) * channels;
    j.src_w = j.src_h = side;
  }
  if (j.src_w == size && j.src_h == size) {
    j.method = ResizeMethod::copy;
    return j;
  }
  // The choices below follow cv::resize -> hal::resize in OpenCV 4.6 for CV_8U, in its order.
  const double inv_x = static_cast<double>(size) / j.src_w;
  const double inv_y = static_cast<double>(size) / j.src_h;
  j.scale_x = 1. / inv_x;
  j.scale_y = 1. / inv_y;
  const bool shrink = j.src_w >= size && j.src_h >= size;
  if (!shrink) {
    j.method = ResizeMethod::linear;
    return j;
  }
  const int ix = static_cast<int>(std::lrint(j.scale_x));
  const int iy = static_cast<int>(std::lrint(j.scale_y));
  const bool fast = std::abs(j.scale_x - ix) < DBL_EPSILON && std::abs(j.scale_y - iy) < DBL_EPSILON;
  if (fast) {
    j.method = ResizeMethod::area_fast;
    j.iscale_x = ix;
    j.iscale_y = iy;
  } else {
    j.method = ResizeMethod::area;
  }
  return j;
}

GpuResizeTimes& GpuResizeTimes::operator+=(const GpuResizeTimes& o) {
  stage_s += o.stage_s;
  upload_s += o.upload_s;
  kernel_s += o.kernel_s;
  download_s += o.download_s;
  wait_s += o.wait_s;
  images += o.images;
  batches += o.batches;
  bytes_up += o.bytes_up;
  bytes_down += o.bytes_down;
  return *this;
}

int gpu_resize_device_for(int local_rank) {
  if (!gpu_resize_built()) fail(kNoCudaBuild);
  const int n = gpu_resize_device_count();
  if (n == 0) fail("--gpu-resize: no CUDA device is available (no driver or no GPU)");
  return local_rank % n;
}

#ifndef CONVOY_HAVE_CUDA

namespace {
[[noreturn]] void no_cuda() { fail(kNoCudaBuild); }
}  // namespace

struct GpuResizer::Impl {};

GpuResizer::GpuResizer(const GpuResizeOptions&) { no_cuda(); }
GpuResizer::~GpuResizer() = default;
uint8_t* GpuResizer::stage(int, int) { no_cuda(); }
bool GpuResizer::add(const uint8_t*, size_t, int, int) { no_cuda(); }
int GpuResizer::count() const { no_cuda(); }
void GpuResizer::submit() { no_cuda(); }
void GpuResizer::wait() { no_cuda(); }
const uint8_t* GpuResizer::output(int) const { no_cuda(); }
const ChannelSums& GpuResizer::sums(int) const { no_cuda(); }
const GpuResizeTimes& GpuResizer::times() const { no_cuda(); }
int GpuResizer::device() const { no_cuda(); }

bool gpu_resize_built() { return false; }
int gpu_resize_device_count() { return 0; }

#endif

}  // namespace convoy::datagen
