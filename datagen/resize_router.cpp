// ResizeRouter: the per-image choice and the cost averages behind it.
// Routing never changes a sample: the GPU kernels give the CPU resampler's bytes exactly.
#include "datagen/resize_router.h"

namespace convoy::datagen {
namespace {
// A CPU resize is one image, a GPU batch many, so the GPU's average moves faster per update.
constexpr double kCpuWeight = 0.1, kGpuWeight = 0.3;

void average(double& mean, double sample, double weight) { mean = mean < 0 ? sample : mean + weight * (sample - mean); }
}  // namespace

bool ResizeRouter::gpu(double pixels, bool always) {
  bool g;
  if (always) {
    ++gpu_images_;
    return true;
  }
  if (cpu_s_per_px_ < 0) {
    g = false;  // measure the CPU first: it needs no batch to finish before it is known
  } else if (gpu_s_per_image_ < 0) {
    g = true;
  } else {
    g = gpu_s_per_image_ < cpu_s_per_px_ * pixels;
  }
  if (g && since_cpu_ >= kExplore)
    g = false;
  else if (!g && since_gpu_ >= kExplore)
    g = true;
  if (g) {
    since_gpu_ = 0;
    ++since_cpu_;
    ++gpu_images_;
  } else {
    since_cpu_ = 0;
    ++since_gpu_;
    ++cpu_images_;
  }
  return g;
}

void ResizeRouter::note_cpu(double pixels, double seconds) {
  if (pixels > 0) average(cpu_s_per_px_, seconds / pixels, kCpuWeight);
}

void ResizeRouter::note_gpu(int images, double seconds) {
  if (images > 0) average(gpu_s_per_image_, seconds / images, kGpuWeight);
}

}  // namespace convoy::datagen
