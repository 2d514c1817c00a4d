// dataset.json: what a dataset folder holds (classes, counts, image shape, per-channel mean/std,
// the batch files with their checksums) and how it was made. Written last and atomically, so
// its presence means every batch file it lists is complete.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shared/batch_file.h"

namespace convoy {

struct BatchFileEntry {
  std::string name;    // relative to the dataset folder
  uint32_t count = 0;  // samples
  uint64_t bytes = 0;
  uint32_t crc32c = 0;  // the file's header CRC (it covers every section's CRC)
};

// How the stored images are sized: all of `shape` (batch-file format v1), or each its own, the
// short side to short_side and the long side capped at max_side (0: no cap), aspect kept (v2).
struct StoredSize {
  bool varied = false;
  uint32_t short_side = 0, max_side = 0;
};

struct DatasetMeta {
  std::vector<std::string> classes;
  std::vector<uint64_t> class_counts;
  uint64_t num_samples = 0;
  ImageShape shape;   // varied sizes: 0 x 0 x channels
  StoredSize resize;  // varied: dataset.json's format_version 2
  Encoding encoding = Encoding::raw;
  uint32_t per_file = 0;          // samples per batch file (the last may hold fewer)
  std::vector<double> mean, std;  // per channel, in pixel units (0..255)
  std::vector<BatchFileEntry> files;
  uint64_t rejected = 0, skipped = 0;
  std::string mean_image;                             // PNG in the folder: the per-pixel mean, rounded ("" if none)
  nlohmann::json made_by = nlohmann::json::object();  // tool, version, inputs, options, seed
  nlohmann::json timings = nlohmann::json::object();  // the only part that varies between equal runs
};

constexpr const char* kDatasetJson = "dataset.json";

nlohmann::json to_json(const DatasetMeta& m);
DatasetMeta dataset_from_json(const nlohmann::json& j, const std::string& where);
void write_dataset_meta(const std::string& dir, const DatasetMeta& meta);
// Reads <dir>/dataset.json; errors name the file and the field.
DatasetMeta read_dataset_meta(const std::string& dir);

}  // namespace convoy
