// Where a datagen run spends its time: seconds per phase, summed over threads and ranks for the
// log and dataset.json's timings. One table names every field, for the sums, the JSON and MPI.
#pragma once
#include <array>
#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

namespace convoy::datagen {

// Seconds spent per phase, summed over threads (and later over ranks). stats: adding samples'
// resized pixels to the dataset statistics; assemble: putting a batch file
// together from its slots; write: the writer threads. With --gpu-resize, resize is the host's
// copying of finished samples into their slots, and the GPU parts are apart: gpu_stage (host:
// into pinned memory; decoding straight into it is counted as decode), gpu_upload, gpu_kernel,
// gpu_download (device time from CUDA events) and gpu_wait (host: blocked on the GPU).
// gpu_images and cpu_images count the samples resized on each.
struct Phases {
  double read = 0, decode = 0, resize = 0, encode = 0, stats = 0, assemble = 0, write = 0, wait = 0;
  double gpu_stage = 0, gpu_upload = 0, gpu_kernel = 0, gpu_download = 0, gpu_wait = 0;
  double gpu_images = 0, cpu_images = 0;

  Phases& operator+=(const Phases& o);
  // The phases as dataset.json's timings hold them; the GPU's only with --gpu-resize.
  nlohmann::json to_json(bool gpu) const;
  // Host seconds the decoding threads spent working (not waiting for work).
  double busy() const { return read + decode + resize + encode + stats + assemble + gpu_stage + gpu_wait; }
};

// Wall-clock seconds of a run's steps on one rank, from the process's start to its end: what a
// user waits for besides the decoding. exec: the process's start to main; mpi_init: MPI's start-up
// (0 without a launcher); index: scanned or reused, and the output folder prepared (rank 0);
// broadcast: to every rank, parsed; plan: the permutation and the rank's share; setup: the inputs
// opened, the writers started; files: the threads' region, every sample made; drain: the last
// files' writes after it; reduce: the statistics and results to rank 0; finish: rank 0's closing
// files (rejects.tsv, mean_image.png, dataset.json).
struct Steps {
  double exec = 0, mpi_init = 0, index = 0, broadcast = 0, plan = 0, setup = 0, files = 0, drain = 0, reduce = 0,
         finish = 0;

  double total() const;
  // Every step but finish (dataset.json holds them, so it is written before finish ends).
  nlohmann::json to_json() const;
  // "exec 0.01, MPI init 0.00, ..." for the log.
  std::string text() const;
};

// A field of Phases: its name in dataset.json, and whether only --gpu-resize reports it.
struct PhaseField {
  const char* name;
  double Phases::*member;
  bool gpu;
};

// Every field of Phases, in declaration order.
constexpr size_t kPhaseCount = 15;
extern const std::array<PhaseField, kPhaseCount> kPhaseFields;
static_assert(sizeof(Phases) == kPhaseCount * sizeof(double), "kPhaseFields must name every field of Phases");

}  // namespace convoy::datagen
