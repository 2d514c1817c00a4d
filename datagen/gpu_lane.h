// One datagen worker thread's share of --gpu-resize: two GpuResizers used in turn, so that the
// thread decodes the next images while the previous batch is uploaded, resized and downloaded.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "datagen/gpu_resize.h"
#include "datagen/resize_router.h"

namespace convoy::datagen {

class GpuLane {
 public:
  // Receives a finished sample: its slot in the batch file and S * S * C bytes, valid during the call.
  using Deliver = std::function<void(size_t slot, const uint8_t* pixels)>;

  // always: take() says yes to every image (no routing).
  explicit GpuLane(const GpuResizeOptions& options, bool always = false);

  // Whether the thread's next image, width x height once decoded, should go to the GPU (then
  // stage or add it) or be resized by the thread itself (then note_cpu its time).
  bool take(int width, int height) { return router_.gpu(double(width) * double(height), always_); }
  void note_cpu(int width, int height, double seconds) { router_.note_cpu(double(width) * double(height), seconds); }
  const ResizeRouter& router() const { return router_; }

  // Room for slot's width x height image (rows packed). When the current resizer is full it is
  // submitted and the other one, once its batch is delivered, takes over.
  uint8_t* stage(int width, int height, size_t slot, const Deliver& deliver);
  // The image last staged will not be there (its decode failed); its output is not delivered.
  void drop_last();
  // Copies an image in (rows row_stride bytes apart); stage time is counted.
  void add(const uint8_t* pixels, size_t row_stride, int width, int height, size_t slot, const Deliver& deliver);
  // Submits what is staged and delivers every sample still on the GPU.
  void drain(const Deliver& deliver);
  // Both resizers' times, plus the lane's own staging copies.
  GpuResizeTimes times() const;

 private:
  void collect(int k, const Deliver& deliver);

  std::array<std::unique_ptr<GpuResizer>, 2> resizers_;
  std::array<std::vector<size_t>, 2> slots_;  // per staged image of each resizer; kDropped if none
  std::array<double, 2> batch_stage_s_{};     // staging copies of each resizer's current batch
  int current_ = 0;
  int channels_ = 3;
  bool always_ = false;
  double stage_s_ = 0;
  ResizeRouter router_;
};

}  // namespace convoy::datagen
