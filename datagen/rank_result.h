// What one rank's share of a run came to (the batch files it wrote, the samples it rejected, its
// phases, the files it kept), and its way to rank 0: one serialised record per rank, gathered.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "datagen/phases.h"
#include "shared/dataset_meta.h"
#include "shared/mpi_context.h"

namespace convoy::datagen {

struct RankResult {
  std::vector<std::pair<uint64_t, BatchFileEntry>> files;  // batch file b, its dataset.json entry
  std::vector<std::pair<uint64_t, std::string>> rejects;   // sample id, why it was rejected
  Phases phases;
  int kept = 0;  // batch files kept from an earlier run

  // The record as bytes, and back (the ranks of one job share byte order and type sizes).
  // from_bytes throws convoy::Error if the bytes are not one whole record.
  std::string to_bytes() const;
  static RankResult from_bytes(const std::string& bytes);
};

// Collective. On rank 0: every rank's results in one, the files in batch-file order, the rejects
// sorted, the phases and kept files summed in rank order; on the other ranks: nothing.
RankResult gather_results(const RankResult& mine, const MpiContext& mpi);

}  // namespace convoy::datagen
