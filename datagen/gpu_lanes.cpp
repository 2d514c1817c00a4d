// GpuLanes: the background maker and the hand-over of finished lanes to the worker threads.
// The maker publishes the lanes once, with release/acquire on state_, so no lock is needed after.
#include "datagen/gpu_lanes.h"

#include <algorithm>

#include "shared/error.h"
#include "shared/timer.h"

namespace convoy::datagen {

GpuLanes::GpuLanes(GpuResizeOptions options, int count, bool always, int local_rank)
    : options_(options), always_(always), local_rank_(local_rank), lanes_(size_t(std::max(count, 0))) {
  // Batches of a few images keep the GPU as busy as larger ones would (the thread decodes the
  // next batch meanwhile), and pinning memory is slow and stalls the other threads' page faults,
  // so each resizer gets little: 4 MiB of staging (grown for a single larger image) and 2 MiB of
  // output.
  const size_t out_bytes = size_t(options.size) * size_t(options.size) * size_t(options.channels);
  options_.staging_bytes = 4u << 20;
  options_.max_images = int(std::clamp<size_t>((2u << 20) / std::max<size_t>(out_bytes, 1), 2, 64));
}

void GpuLanes::start() {
  if (started_) return;
  started_ = true;
  maker_ = std::thread([this] {
    Stopwatch w;
    try {
      if (options_.device < 0) options_.device = gpu_resize_device_for(local_rank_);
      for (auto& l : lanes_) l = std::make_unique<GpuLane>(options_, always_);
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
  start();
  if (maker_.joinable()) maker_.join();
  if (state_.load() == failed) fail(error_);
}

}  // namespace convoy::datagen
