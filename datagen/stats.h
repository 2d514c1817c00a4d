// Dataset statistics from exact integer sums (class counts, per-channel sums and sums of squares,
// per-pixel sums for the mean image), so that the reduced result, and the mean/std computed from
// it, are the same for any number of ranks and threads.
#pragma once
#include <cstdint>
#include <vector>

#include "shared/batch_file.h"
#include "shared/mpi_context.h"

namespace convoy::datagen {

struct DatasetSums {
  std::vector<uint64_t> class_counts;
  std::vector<uint64_t> channel_sum, channel_sq;  // per channel
  std::vector<uint64_t> pixel_sum;                // per pixel and channel (HWC): the mean image
  uint64_t samples = 0;
  uint64_t pixels = 0;  // samples of varied sizes (no pixel_sum): their pixels, all added up

  DatasetSums(size_t classes, const ImageShape& shape);
  // Adds another set of sums (a thread's); integers, so the order of merging never matters.
  void merge(const DatasetSums& other);
  // Sums over all ranks onto rank 0.
  void reduce_to_root(const MpiContext& mpi);
  std::vector<double> mean() const;
  std::vector<double> stddev() const;
  std::vector<uint8_t> mean_image() const;  // rounded to pixel values
};

// One thread's running sums, cheap enough to add each sample to as soon as it is made: the
// per-pixel sums first go into 16-bit counters that stay in cache and are folded into the 64-bit
// totals before they can overflow.
class SampleSums {
 public:
  SampleSums(size_t classes, const ImageShape& shape);
  // One sample of the shape (HWC), of class `label`.
  void add(const uint8_t* px, int32_t label);
  // One sample of its own size (HWC, `bytes` of them), where the shape's height and width are 0.
  void add_varied(const uint8_t* px, size_t bytes, int32_t label);
  // Totals taken elsewhere (a kept file's samples).
  void add(const DatasetSums& sums) { totals_.merge(sums); }
  // Everything added so far, as exact totals.
  const DatasetSums& totals();

 private:
  void fold();

  DatasetSums totals_;
  std::vector<uint16_t> pixel_;  // per-pixel sums of the samples not yet folded
  unsigned unfolded_ = 0;
};

}  // namespace convoy::datagen
