// The names of the files in a dataset folder that datagen writes besides dataset.json: the batch
// files, the saved index, the run's identity (for resume), the rejects and the mean image.
#pragma once
#include "shared/batch_file.h"

namespace convoy::datagen {

using convoy::batch_file_name;  // batch_00042.cvb
constexpr const char* kIndexFile = "index.tsv";
constexpr const char* kRunFile = "datagen_run.json";
constexpr const char* kRejectsFile = "rejects.tsv";
constexpr const char* kMeanImageFile = "mean_image.png";

}  // namespace convoy::datagen
