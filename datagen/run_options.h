// What a datagen run is asked to do: its inputs, output folder and options, and the checks that
// refuse bad ones in one line before any work.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "datagen/image_codec.h"
#include "shared/batch_file.h"
#include "shared/resize.h"

namespace convoy::datagen {

struct RunOptions {
  std::vector<std::string> inputs;
  std::string output;
  int size = 0;
  int channels = 3;
  std::string classes_file, labels_file;
  uint32_t per_file = 1024;
  uint64_t seed = 1;
  int threads = 0;  // 0: the cores of this node shared among its ranks
  // Writer threads per rank and batch files a rank holds in memory at once; 0: chosen from the
  // threads and the file size (batch_writer.h). Not part of the dataset's identity.
  int writers = 0;
  int files_in_memory = 0;
  ResizePolicy resize = ResizePolicy::crop;
  // --resize short: the long side capped at this many pixels, aspect kept (0: no cap).
  int max_side = 0;
  Encoding encoding = Encoding::raw;
  int quality = 90;
  DecodeLimits limits;
  // Resize on the GPU of this rank's node (local rank modulo the devices there). Not part of the
  // dataset's identity: the samples are byte-identical to the CPU path's.
  bool gpu_resize = false;
  // With gpu_resize: false sends each image where it costs less (datagen/resize_router.h) and
  // resizes on the CPU until the GPU is ready; true waits for the GPU and sends it every image.
  bool gpu_always = false;
  // With gpu_resize and not gpu_always: the GPU is started only once the CPU resize time left,
  // per thread, is at least this many seconds (it then pays for CUDA's start-up).
  double gpu_min_saving = 0.5;
  // Scan, save index.tsv and make the plan, then stop (a later run reuses the saved index).
  bool index_only = false;
  // Where to write the run's timeline (datagen/timeline.h), or "" for none. Not part of the
  // dataset's identity.
  std::string timeline;

  // --resize short: each sample its own size (batch-file format v2).
  bool varied() const { return resize == ResizePolicy::short_side; }
  // The shape of every sample: size x size x channels; 0 x 0 x channels where they vary.
  ImageShape shape() const {
    return varied() ? ImageShape{0, 0, uint32_t(channels)}
                    : ImageShape{uint32_t(size), uint32_t(size), uint32_t(channels)};
  }
  // The most bytes one sample can take: the short side `size`, the long one within --max-side
  // or --max-aspect times it.
  size_t max_sample_bytes() const;
  // What a sample takes as a rule, for sizing memory: a 4:3 image where sizes vary.
  size_t typical_sample_bytes() const;
};

// Checks flags and inputs before any work; throws convoy::Error naming the flag or file.
void validate_run_options(const RunOptions& opt);

}  // namespace convoy::datagen
