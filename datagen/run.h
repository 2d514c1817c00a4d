// The datagen run: scan -> index -> plan -> batch files dealt to ranks, decoded and resized by
// OpenMP threads -> dataset.json, written last by rank 0 once every batch file is complete.
#pragma once
#include "datagen/dataset_files.h"
#include "datagen/phases.h"
#include "datagen/run_options.h"
#include "shared/mpi_context.h"

namespace convoy::datagen {

// Runs on every rank. Returns 0, or 2 when an input was cut short or damaged (what came before is
// in the dataset). Errors before the work starts are thrown on every rank alike; an error during
// the work is printed by the rank that meets it, which then aborts the job.
// before: the steps taken before the run (the process's start, MPI's), for the timings.
int run_datagen(const RunOptions& opt, const MpiContext& mpi, const Steps& before = {});

}  // namespace convoy::datagen
