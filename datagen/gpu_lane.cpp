// Alternation of a thread's two resizers. A resizer is reused only after its previous batch has
// been delivered, because staging into it again discards that batch's outputs.
#include "datagen/gpu_lane.h"

#include <cstring>
#include <limits>

#include "shared/error.h"
#include "shared/timer.h"

namespace convoy::datagen {
namespace {
constexpr size_t kDropped = std::numeric_limits<size_t>::max();
}  // namespace

GpuLane::GpuLane(const GpuResizeOptions& options, bool always) : channels_(options.channels), always_(always) {
  for (auto& r : resizers_) r = std::make_unique<GpuResizer>(options);
}

uint8_t* GpuLane::stage(int width, int height, size_t slot, const Deliver& deliver) {
  uint8_t* p = resizers_[size_t(current_)]->stage(width, height);
  if (p == nullptr) {
    resizers_[size_t(current_)]->submit();
    current_ ^= 1;
    collect(current_, deliver);
    p = resizers_[size_t(current_)]->stage(width, height);
    if (p == nullptr) fail("internal: an empty GPU resizer refused an image");
  }
  slots_[size_t(current_)].push_back(slot);
  return p;
}

void GpuLane::drop_last() { slots_[size_t(current_)].back() = kDropped; }

void GpuLane::add(const uint8_t* pixels, size_t row_stride, int width, int height, size_t slot,
                  const Deliver& deliver) {
  uint8_t* dst = stage(width, height, slot, deliver);
  Stopwatch sw;
  const size_t row = size_t(width) * size_t(channels_);
  for (int y = 0; y < height; ++y) std::memcpy(dst + row * size_t(y), pixels + row_stride * size_t(y), row);
  const double s = sw.seconds();
  stage_s_ += s;
  batch_stage_s_[size_t(current_)] += s;
}

void GpuLane::drain(const Deliver& deliver) {
  resizers_[size_t(current_)]->submit();
  collect(current_ ^ 1, deliver);
  collect(current_, deliver);
}

void GpuLane::collect(int k, const Deliver& deliver) {
  auto& slots = slots_[size_t(k)];
  if (slots.empty()) return;
  GpuResizer& r = *resizers_[size_t(k)];
  Stopwatch sw;
  r.wait();
  // What the batch cost this thread: its staging copies and the wait. Handing the outputs over
  // is left out, because for JPEG output it includes the encoding, which the CPU path pays too.
  router_.note_gpu(int(slots.size()), sw.seconds() + batch_stage_s_[size_t(k)]);
  batch_stage_s_[size_t(k)] = 0;
  for (size_t j = 0; j < slots.size(); ++j)
    if (slots[j] != kDropped) deliver(slots[j], r.output(int(j)));
  slots.clear();
}

GpuResizeTimes GpuLane::times() const {
  GpuResizeTimes t = resizers_[0]->times();
  t += resizers_[1]->times();
  t.stage_s += stage_s_;
  return t;
}

}  // namespace convoy::datagen
