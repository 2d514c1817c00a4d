// One progress display for the whole job: every rank reports each finished batch file to rank 0,
// which prints images done / total, images/s and ETA (a bar on a terminal, plain lines otherwise).
#pragma once
#include <cstdint>
#include <vector>

#include "shared/mpi_context.h"
#include "shared/timer.h"

namespace convoy::datagen {

class Progress {
 public:
  // files_per_rank[r]: how many batch-file reports rank r will send.
  Progress(const MpiContext& mpi, uint64_t total, std::vector<uint64_t> files_per_rank);
  // Called by the rank after each of its batch files (samples planned for it, kept or not).
  void file_done(uint64_t samples);
  // Rank 0: waits for every other rank's reports, printing as they come; others: no-op.
  void finish();

 private:
  void poll(bool block);
  void print(bool final);

  const MpiContext& mpi_;
  uint64_t total_, done_ = 0;
  std::vector<uint64_t> pending_;  // reports still to come from each rank (rank 0 only)
  Stopwatch clock_;
  double last_print_ = -1e9;
  bool tty_;
};

}  // namespace convoy::datagen
