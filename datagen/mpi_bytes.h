// Byte strings between datagen's ranks: broadcast from one rank, or gathered onto rank 0. The
// index travels this way, and each rank's results (datagen/rank_result.h).
#pragma once
#include <string>
#include <vector>

#include "shared/mpi_context.h"

namespace convoy::datagen {

// `s` from rank `root` on every rank (in pieces of at most 1 GiB: MPI's counts are int).
void bcast_string(std::string& s, int root);

// Every rank's string, on rank 0 (in rank order); empty on the others.
std::vector<std::string> gather_strings(const std::string& mine, const MpiContext& mpi);

}  // namespace convoy::datagen
