// A dataset folder's record of the run that made it (datagen_run.json: its options and inputs,
// the index checksum, the inputs' time stamps), so that a rerun reuses the index and resumes.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "datagen/run_options.h"

namespace convoy::datagen {

// The options that decide a dataset's bytes, as dataset.json's made_by records them.
nlohmann::json made_by(const RunOptions& opt);

// What the inputs looked like when they were scanned: size and modification time of each input
// file, and the contents' checksum of the class and label files. Null when a folder is among the
// inputs, whose contents no single time stamp covers (folders are always scanned again).
nlohmann::json input_stamps(const RunOptions& opt);

// The index saved by an earlier run into this folder, when its options and inputs are unchanged
// (a rerun after a crash need not scan a large archive again); "" otherwise.
std::string saved_index(const RunOptions& opt, const nlohmann::json& stamps);

// Rank 0, before any batch file is written, in a folder claimed by claim_output: refuse a folder
// that holds another run's output, save this run's identity (its options and the index checksum;
// the time stamps only decide whether the index can be reused) and then the index.
void prepare_output(const RunOptions& opt, const std::string& index_text, const nlohmann::json& stamps);

}  // namespace convoy::datagen
