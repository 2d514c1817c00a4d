// Host side of --gpu-resize that every build has: device choice, time totals and, in the CPU-only
// build, a GpuResizer that says clearly that CUDA is missing.
#include "datagen/gpu_resize.h"

#include <filesystem>
#include <string>

#include "shared/error.h"

namespace convoy::datagen {

namespace {
constexpr const char* kNoCudaBuild =
    "--gpu-resize: this datagen was built without CUDA (configure with nvcc present to get it)";
}  // namespace

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

int gpu_resize_listed_gpus() {
  // The driver lists its GPUs here (Linux) without CUDA being started; CUDA_VISIBLE_DEVICES may
  // hide some or all of them, which only CUDA itself can tell, when the lanes start.
  std::error_code ec;
  int n = 0;
  for (std::filesystem::directory_iterator it("/proc/driver/nvidia/gpus", ec), end; !ec && it != end; it.increment(ec))
    ++n;
  return n;
}

void gpu_resize_check_available() {
  if (!gpu_resize_built()) fail(kNoCudaBuild);
  if (gpu_resize_listed_gpus() == 0)
    fail("--gpu-resize: no CUDA device is available (the NVIDIA driver lists no GPU in /proc/driver/nvidia/gpus)");
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
