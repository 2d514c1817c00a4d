// A dataset's identity: the fields of its dataset.json that decide what a net learns from it, the
// batch files' checksums folded into one CRC32C, so that the same images in another order differ.
#include "train/data_identity.h"

#include <filesystem>

#include "shared/crc32c.h"

namespace convoy {
namespace {

uint32_t files_crc(const std::vector<BatchFileEntry>& files) {
  uint32_t crc = 0;
  for (const BatchFileEntry& f : files) {
    crc = crc32c(f.name.data(), f.name.size() + 1, crc);  // with its terminating zero
    crc = crc32c(&f.count, sizeof f.count, crc);
    crc = crc32c(&f.bytes, sizeof f.bytes, crc);
    crc = crc32c(&f.crc32c, sizeof f.crc32c, crc);
  }
  return crc;
}

std::string absolute_dir(const std::string& dir) {
  std::string abs = std::filesystem::absolute(dir).lexically_normal().string();
  while (abs.size() > 1 && abs.back() == '/') abs.pop_back();
  return abs;
}

std::string samples_text(uint64_t n) { return std::to_string(n) + (n == 1 ? " sample" : " samples"); }

}  // namespace

DataIdentity identity_of(const DatasetMeta& meta, const std::string& dir) {
  DataIdentity d;
  d.dir = absolute_dir(dir);
  d.num_samples = meta.num_samples;
  d.classes = meta.classes;
  d.shape = meta.shape;
  d.files_crc32c = files_crc(meta.files);
  d.mean = meta.mean;
  d.std = meta.std;
  return d;
}

nlohmann::json to_json(const DataIdentity& d) {
  return {{"dir", d.dir},
          {"num_samples", d.num_samples},
          {"classes", d.classes},
          {"image", {{"height", d.shape.height}, {"width", d.shape.width}, {"channels", d.shape.channels}}},
          {"files_crc32c", d.files_crc32c},
          {"mean", d.mean},
          {"std", d.std}};
}

DataIdentity data_identity_from_json(const nlohmann::json& j) {
  DataIdentity d;
  d.dir = j.at("dir").get<std::string>();
  d.num_samples = j.at("num_samples").get<uint64_t>();
  d.classes = j.at("classes").get<std::vector<std::string>>();
  const nlohmann::json& img = j.at("image");
  d.shape = {img.at("height").get<uint32_t>(), img.at("width").get<uint32_t>(), img.at("channels").get<uint32_t>()};
  d.files_crc32c = j.at("files_crc32c").get<uint32_t>();
  d.mean = j.at("mean").get<std::vector<double>>();
  d.std = j.at("std").get<std::vector<double>>();
  return d;
}

std::string difference(const DataIdentity& given, const DataIdentity& recorded) {
  if (given.num_samples != recorded.num_samples)
    return samples_text(given.num_samples) + ", the checkpoint's has " + std::to_string(recorded.num_samples);
  if (!(given.shape == recorded.shape))
    return shape_text(given.shape) + " samples, the checkpoint's are " + shape_text(recorded.shape);
  if (given.classes.size() != recorded.classes.size())
    return std::to_string(given.classes.size()) + " classes, the checkpoint's has " +
           std::to_string(recorded.classes.size());
  for (size_t i = 0; i < given.classes.size(); ++i)
    if (given.classes[i] != recorded.classes[i])
      return "class " + std::to_string(i) + " is '" + given.classes[i] + "', the checkpoint's is '" +
             recorded.classes[i] + "'";
  if (given.files_crc32c != recorded.files_crc32c)
    return "the same number of samples, but other batch files: other images, or the same in another order";
  if (given.mean != recorded.mean || given.std != recorded.std)
    return "its dataset.json gives another mean or std than the checkpoint's";
  return "";
}

std::string shape_text(const ImageShape& s) {
  return std::to_string(s.channels) + "x" + std::to_string(s.height) + "x" + std::to_string(s.width);
}

}  // namespace convoy
