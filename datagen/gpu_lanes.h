// The GPU lanes of one datagen process, one per OpenMP thread, made on a thread of their own so
// that CUDA's start-up and the pinned allocations overlap the images that the CPU resizes meanwhile.
#pragma once
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "datagen/gpu_lane.h"

namespace convoy::datagen {

class GpuLanes {
 public:
  // `count` lanes for `options` (staging and batch sizes are chosen here, small enough that many
  // threads' pinned buffers stay cheap to allocate); always: the lanes' routers send every image
  // to the GPU. Nothing touches CUDA before start(), which also picks the device for local_rank
  // (gpu_resize_device_for) unless options.device is set (>= 0).
  GpuLanes(GpuResizeOptions options, int count, bool always, int local_rank = 0);
  ~GpuLanes();
  GpuLanes(const GpuLanes&) = delete;
  GpuLanes& operator=(const GpuLanes&) = delete;

  // Starts making the lanes (once; later calls do nothing). start, started and wait_ready are
  // for one thread (the run's); get is for any.
  void start();
  bool started() const { return started_; }
  // Lane i, or nullptr until the lanes are made (the thread resizes on the CPU meanwhile).
  // Throws convoy::Error if making them failed.
  GpuLane* get(int i);
  // Starts them if need be and blocks until they are made; throws as get() does.
  void wait_ready();
  // Seconds from construction until the lanes were ready (0 while not ready).
  double ready_seconds() const { return ready_s_.load(); }
  // The CUDA device of the lanes; -1 until they are ready.
  int device() const { return state_.load(std::memory_order_acquire) == ready ? options_.device : -1; }

 private:
  enum State { making, ready, failed };
  GpuResizeOptions options_;
  bool always_ = false;
  int local_rank_ = 0;
  bool started_ = false;
  std::vector<std::unique_ptr<GpuLane>> lanes_;
  std::atomic<int> state_{making};
  std::atomic<double> ready_s_{0};
  std::string error_;
  std::thread maker_;
};

}  // namespace convoy::datagen
