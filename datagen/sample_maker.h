// One sample made from its member's bytes: read, decoded (JPEGs DCT-scaled toward the output
// size), resized and, for JPEG output, encoded into its slot; on the CPU, or with --gpu-resize
// staged for the thread's GPU lane where its router says the GPU is cheaper.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include <opencv2/core.hpp>

#include "datagen/file_job.h"
#include "datagen/gpu_lane.h"
#include "datagen/phases.h"
#include "datagen/run_options.h"
#include "datagen/sample_source.h"
#include "datagen/timeline.h"

namespace convoy::datagen {

class SampleMaker {
 public:
  SampleMaker(const RunOptions& opt, const SampleSource& source) : opt_(opt), source_(source) {}

  // Sample `id` made into `out` by this thread (out.raw set, also for JPEG output; where sizes
  // vary out.dims and out.pixels instead, and out.encoded, if set, gets the raw or JPEG bytes);
  // returns "" or the reason it is rejected. Throws convoy::Error when its bytes cannot be read.
  std::string make(uint64_t id, const SlotOut& out, Phases& t) const;

  // --gpu-resize: sample `id` read, decoded and, where the lane's router says the GPU is
  // cheaper, staged (decoded straight into pinned memory when the codec can; deliver(tag)
  // receives it once resized): returns true then. Otherwise it is made here, as make() does,
  // `reason` set to "" or why it is rejected, and false is returned.
  bool route(uint64_t id, const SlotOut& out, size_t tag, GpuLane& lane, const GpuLane::Deliver& deliver,
             std::string& reason, Phases& t) const;

  // A sample the GPU resized (S x S x C, packed) into its slot: copied, or JPEG-encoded.
  void place_resized(const uint8_t* pixels, const SlotOut& out, Phases& t) const;

 private:
  // A decoded image resized by this thread into out.raw (and, for JPEG output, encoded from there
  // into its slot), timed by the thread's laps; returns the resize's seconds.
  double resize_on_cpu(const cv::Mat& img, const SlotOut& out, Phases& t, Laps& lap) const;
  // The same where sizes vary: the short side to --resize short:S, the long one within --max-side.
  double resize_varied(const cv::Mat& img, const SlotOut& out, Phases& t, Laps& lap) const;

  const RunOptions& opt_;
  const SampleSource& source_;
};

}  // namespace convoy::datagen
