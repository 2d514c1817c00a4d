// datagen --gpu-resize: many decoded images per upload and per launch, resized on the GPU to the
// same S x S x C samples as shared/resize.cpp, bit for bit. One GpuResizer per thread.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "shared/resize_math.h"

namespace convoy::datagen {

// Where the GPU time of one resizer went. Device phases come from CUDA events on the resizer's
// stream, so they include time spent queued behind other threads' work on the same GPU.
struct GpuResizeTimes {
  double stage_s = 0;     // host: copying decoded pixels into pinned memory
  double upload_s = 0;    // device: host-to-device copies
  double kernel_s = 0;    // device: resize (and channel-sum) kernel
  double download_s = 0;  // device: device-to-host copies
  double wait_s = 0;      // host: blocked until the batch was done
  uint64_t images = 0, batches = 0;
  uint64_t bytes_up = 0, bytes_down = 0;
  GpuResizeTimes& operator+=(const GpuResizeTimes& o);
};

// Exact per-channel totals of one output sample, for the dataset mean/std.
struct ChannelSums {
  uint64_t sum[4] = {0, 0, 0, 0};
  uint64_t sum_sq[4] = {0, 0, 0, 0};
};

struct GpuResizeOptions {
  int device = 0;                    // CUDA device; datagen passes its local MPI rank mod the count
  int size = 0;                      // S
  ResizePolicy policy{};             // crop or squash (short is refused)
  int channels = 3;                  // 1 or 3; every image of the resizer has this many
  size_t staging_bytes = 32u << 20;  // pinned input per batch; grows for a single larger image
  int max_images = 128;              // samples per batch
  bool channel_sums = false;         // also compute ChannelSums per sample
};

// The usual cycle: add (or stage) images until one returns false or the caller's batch ends,
// submit, do other work, wait, read output(i) / sums(i); the next add or stage starts a new batch.
// A thread that wants its own decoding to overlap the GPU keeps two resizers and alternates.
class GpuResizer {
 public:
  explicit GpuResizer(const GpuResizeOptions& options);
  ~GpuResizer();
  GpuResizer(const GpuResizer&) = delete;
  GpuResizer& operator=(const GpuResizer&) = delete;

  // Room in pinned memory for a width x height image of options.channels, rows packed; the caller
  // decodes straight into it before submit(). nullptr when the batch is full (submit first).
  uint8_t* stage(int width, int height);
  // Copies an image in (rows row_stride bytes apart). false when the batch is full.
  bool add(const uint8_t* pixels, size_t row_stride, int width, int height);

  int count() const;  // images in the current batch
  // Starts upload, kernel and download on this resizer's stream and returns at once.
  void submit();
  // Blocks until the submitted batch is done; its outputs stay valid until the next add/stage.
  void wait();
  const uint8_t* output(int i) const;  // S * S * channels bytes, HWC
  const ChannelSums& sums(int i) const;
  const GpuResizeTimes& times() const;  // totals over every batch so far
  int device() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// True when this build has the CUDA resizer (false in the CPU-only build).
bool gpu_resize_built();
// Devices usable for --gpu-resize; 0 without the CUDA build, a driver or a device.
int gpu_resize_device_count();
// The device for a process: its rank among the processes of its node, modulo the devices there, so
// one GPU serves one rank or is shared by several. Throws convoy::Error when there is none.
int gpu_resize_device_for(int local_rank);
// The GPUs the NVIDIA driver lists (/proc/driver/nvidia/gpus), found without starting CUDA.
int gpu_resize_listed_gpus();
// Refuses --gpu-resize up front (convoy::Error) in a build without CUDA, or where the NVIDIA driver
// lists no GPU. It does not start CUDA: each process that starts it pays a fraction of a second,
// which a datagen rank that ends up resizing on the CPU alone should not.
void gpu_resize_check_available();

}  // namespace convoy::datagen
