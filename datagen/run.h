// The datagen run: scan -> index -> plan -> batch files dealt to ranks, decoded and resized by
// OpenMP threads -> dataset.json, written last by rank 0 once every batch file is complete.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "datagen/image_codec.h"
#include "shared/resize.h"
#include "shared/batch_file.h"
#include "shared/mpi_context.h"

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
  ResizePolicy resize = ResizePolicy::crop;
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
  // Stop once the index is saved and the plan made, decoding nothing (a later run with the same
  // options reuses the saved index).
  bool index_only = false;
};

// Checks flags and inputs before any work; throws convoy::Error naming the flag or file.
void validate_run_options(const RunOptions& opt);

// Runs on every rank. Returns 0, or 2 when an input was cut short or damaged (what came before is
// in the dataset). Errors before the work starts are thrown on every rank alike; an error during
// the work is printed by the rank that meets it, which then aborts the job.
int run_datagen(const RunOptions& opt, const MpiContext& mpi);

// Names of the files in a dataset folder.
std::string batch_file_name(uint64_t b);
constexpr const char* kIndexFile = "index.tsv";
constexpr const char* kRunFile = "datagen_run.json";
constexpr const char* kRejectsFile = "rejects.tsv";
constexpr const char* kMeanImageFile = "mean_image.png";

}  // namespace convoy::datagen
