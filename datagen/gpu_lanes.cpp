// GpuLanes: the background maker and the hand-over of finished lanes to the worker threads.
// The maker publishes the lanes once, with release/acquire on state_, so no lock is needed after.
#include "datagen/gpu_lanes.h"

#include <algorithm>

#include "shared/error.h"
#include "shared/timer.h"

namespace convoy::datagen {

GpuLanes::GpuLanes(GpuResizeOptions options, int count, bool always) : lanes_(size_t(std::max(count, 0))) {
  // A thread's share of a batch file is per_file / threads images, so small batches suffice; the
  // staging buffer still grows for a single image larger than it.
  const size_t out_bytes = size_t(options.size) * size_t(options.size) * size_t(options.channels);
  options.staging_bytes = 16u << 20;
  options.max_images = int(std::clamp<size_t>((8u << 20) / std::max<size_t>(out_bytes, 1), 4, 64));
  maker_ = std::thread([this, options, always] {
    Stopwatch w;
    try {
      for (auto& l : lanes_) l = std::make_unique<GpuLane>(options, always);
      ready_s_ = w.seconds();
      state_.store(ready, std::memory_order_release);
    } catch (const std::exception& e) {
      error_ = e.what();
      state_.store(failed, std::memory_order_release);
    }
  });
}

GpuLanes::~GpuLanes() {
  if (maker_.joinable()) maker_.join();
}

GpuLane* GpuLanes::get(int i) {
  const int s = state_.load(std::memory_order_acquire);
  if (s == making) return nullptr;
  if (s == failed) fail(error_);
  return lanes_.at(size_t(i)).get();
}

void GpuLanes::wait_ready() {
  if (maker_.joinable()) maker_.join();
  if (state_.load() == failed) fail(error_);
}

}  // namespace convoy::datagen
