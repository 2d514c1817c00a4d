// dataset.json read and write. The reader checks types and ranges so a hand-edited or damaged
// file is refused with the field that is wrong, not with a crash later in the loader.
#include "shared/dataset_meta.h"

#include <set>

#include "shared/atomic_file.h"
#include "shared/error.h"
#include "shared/regular_file.h"

namespace convoy {

using nlohmann::json;

json to_json(const DatasetMeta& m) {
  json files = json::array();
  for (const auto& f : m.files)
    files.push_back({{"name", f.name}, {"count", f.count}, {"bytes", f.bytes}, {"crc32c", f.crc32c}});
  json j{
      {"format", "convoy-dataset"},
      {"format_version", m.resize.varied ? 2 : 1},
      {"classes", m.classes},
      {"class_counts", m.class_counts},
      {"num_samples", m.num_samples},
      {"image", m.resize.varied
                    ? json{{"resize", "short"},
                           {"short", m.resize.short_side},
                           {"max_side", m.resize.max_side},
                           {"channels", m.shape.channels}}
                    : json{{"height", m.shape.height}, {"width", m.shape.width}, {"channels", m.shape.channels}}},
      {"encoding", encoding_name(m.encoding)},
      {"per_file", m.per_file},
      {"mean", m.mean},
      {"std", m.std},
      {"rejected", m.rejected},
      {"skipped", m.skipped},
      {"files", files},
      {"made_by", m.made_by},
      {"timings", m.timings},
  };
  if (!m.mean_image.empty()) j["mean_image"] = m.mean_image;
  return j;
}

DatasetMeta dataset_from_json(const json& j, const std::string& where) {
  DatasetMeta m;
  auto field = [&](const char* key) -> const json& {
    if (!j.contains(key)) fail_file(where, std::string("missing field '") + key + "'");
    return j.at(key);
  };
  try {
    if (field("format").get<std::string>() != "convoy-dataset") fail_file(where, "not a convoy dataset.json");
    const int version = field("format_version").get<int>();
    if (version != 1 && version != 2) fail_file(where, "unsupported format_version " + std::to_string(version));
    m.resize.varied = version == 2;
    m.classes = field("classes").get<std::vector<std::string>>();
    m.class_counts = field("class_counts").get<std::vector<uint64_t>>();
    m.num_samples = field("num_samples").get<uint64_t>();
    const json& img = field("image");
    if (m.resize.varied) {
      if (img.at("resize").get<std::string>() != "short") fail_file(where, "image.resize must be \"short\"");
      m.resize.short_side = img.at("short").get<uint32_t>();
      m.resize.max_side = img.at("max_side").get<uint32_t>();
      m.shape = {0, 0, img.at("channels").get<uint32_t>()};
    } else {
      m.shape = {img.at("height").get<uint32_t>(), img.at("width").get<uint32_t>(), img.at("channels").get<uint32_t>()};
    }
    m.encoding = parse_encoding(field("encoding").get<std::string>());
    m.per_file = field("per_file").get<uint32_t>();
    m.mean = field("mean").get<std::vector<double>>();
    m.std = field("std").get<std::vector<double>>();
    m.rejected = j.value("rejected", uint64_t{0});
    m.skipped = j.value("skipped", uint64_t{0});
    m.mean_image = j.value("mean_image", std::string());
    for (const json& f : field("files"))
      m.files.push_back({f.at("name").get<std::string>(), f.at("count").get<uint32_t>(), f.at("bytes").get<uint64_t>(),
                         f.at("crc32c").get<uint32_t>()});
    m.made_by = j.value("made_by", json::object());
    m.timings = j.value("timings", json::object());
  } catch (const json::exception& e) {
    fail_file(where, std::string("malformed: ") + e.what());
  }
  if (m.resize.varied ? m.shape.channels == 0 || m.resize.short_side == 0 : m.shape.bytes() == 0)
    fail_file(where, "image shape has a zero dimension");
  if (m.mean.size() != m.shape.channels || m.std.size() != m.shape.channels)
    fail_file(where, "mean/std must have one value per channel");
  if (!m.mean_image.empty() && (m.mean_image.find('/') != std::string::npos || m.mean_image[0] == '.'))
    fail_file(where, "bad mean_image name '" + m.mean_image + "'");
  if (m.class_counts.size() != m.classes.size()) fail_file(where, "class_counts and classes differ in length");
  uint64_t total = 0;
  std::set<std::string> names;
  for (const auto& f : m.files) {
    if (f.name.empty() || f.name.find('/') != std::string::npos || f.name[0] == '.')
      fail_file(where, "bad batch-file name '" + f.name + "'");
    // Each entry would pass its checks against the same file: its samples would come twice.
    if (!names.insert(f.name).second) fail_file(where, "lists batch file '" + f.name + "' twice");
    total += f.count;
  }
  if (total != m.num_samples) fail_file(where, "file counts do not add up to num_samples");
  return m;
}

void write_dataset_meta(const std::string& dir, const DatasetMeta& meta) {
  write_file_atomic(join_path(dir, kDatasetJson), to_json(meta).dump(2) + "\n");
}

DatasetMeta read_dataset_meta(const std::string& dir) {
  const std::string path = join_path(dir, kDatasetJson);
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    fail_file(dir, "no dataset.json (not a dataset folder, or datagen did not finish)");
  require_regular_file(path, st);  // a named pipe would block the reader for good
  json j;
  try {
    j = json::parse(read_whole_file(path));
  } catch (const json::parse_error& e) {
    fail_file(path, std::string("not valid JSON: ") + e.what());
  }
  return dataset_from_json(j, path);
}

}  // namespace convoy
