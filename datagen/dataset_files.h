// The names of the files in a dataset folder that datagen writes besides dataset.json: the batch
// files, the saved index, the run's identity (for resume), the rejects, the mean image, the lock.
#pragma once
#include <string>

#include "shared/batch_file.h"

namespace convoy::datagen {

using convoy::batch_file_name;  // batch_00042.cvb
constexpr const char* kIndexFile = "index.tsv";
constexpr const char* kRunFile = "datagen_run.json";
constexpr const char* kRejectsFile = "rejects.tsv";
constexpr const char* kMeanImageFile = "mean_image.png";
// Held locked (flock) by the run that writes the folder, for its whole length, then removed.
constexpr const char* kLockFile = "datagen.lock";

// Whether a file of this name is one that datagen writes into a dataset folder (dataset.json,
// batch_NNNNN.cvb, the files above); temporaries are not (shared/atomic_file.h names them).
bool is_dataset_file_name(const std::string& name);

}  // namespace convoy::datagen
