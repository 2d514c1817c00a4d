// What a checkpoint records of a dataset its run was made from: what identifies it (its samples,
// classes, image shape, batch files and statistics) and so how the net saw it (mean and std).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shared/dataset_meta.h"

namespace convoy {

struct DataIdentity {
  std::string dir;  // absolute, where the dataset was when the run started ("" = none)
  uint64_t num_samples = 0;
  std::vector<std::string> classes;
  ImageShape shape;
  uint32_t files_crc32c = 0;      // over every batch file's name, samples, size and CRC, in order
  std::vector<double> mean, std;  // per channel, pixel units: the normalisation the net was trained with
};

// The identity of the dataset in `dir` (made absolute), whose dataset.json `meta` is.
DataIdentity identity_of(const DatasetMeta& meta, const std::string& dir);
nlohmann::json to_json(const DataIdentity& d);
// Throws nlohmann::json's exceptions on a missing or mistyped field.
DataIdentity data_identity_from_json(const nlohmann::json& j);

// "" when `given` is the dataset `recorded` identifies (wherever it lies now); else what differs
// first, in words for a message, e.g. "1000 samples, the checkpoint's has 3000".
std::string difference(const DataIdentity& given, const DataIdentity& recorded);
// An image shape as the net sees it: "3x64x64" (channels x height x width).
std::string shape_text(const ImageShape& s);

}  // namespace convoy
