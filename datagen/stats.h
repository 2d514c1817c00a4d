// Dataset statistics from exact integer sums (class counts, per-channel sums and sums of squares,
// per-pixel sums for the mean image), so that the reduced result, and the mean/std computed from
// it, are the same for any number of ranks and threads.
#pragma once
#include <cstdint>
#include <vector>

#include "shared/batch_file.h"
#include "shared/mpi_context.h"

namespace convoy::datagen {

class ImageCodec;

struct DatasetSums {
  std::vector<uint64_t> class_counts;
  std::vector<uint64_t> channel_sum, channel_sq;  // per channel
  std::vector<uint64_t> pixel_sum;                // per pixel and channel (HWC): the mean image
  uint64_t samples = 0;

  DatasetSums(size_t classes, const ImageShape& shape);
  // Adds every sample of a batch file; JPEG samples are decoded (what the loader will see).
  void add(const Batch& batch, ImageCodec& codec);
  // Sums over all ranks onto rank 0.
  void reduce_to_root(const MpiContext& mpi);
  std::vector<double> mean() const;
  std::vector<double> stddev() const;
  std::vector<uint8_t> mean_image() const;  // rounded to pixel values
};

}  // namespace convoy::datagen
