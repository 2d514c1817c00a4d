// The identity is compared as JSON: equal options, inputs and index checksum mean the batch files
// already in the folder were planned the same way, so each one whose checksums verify is kept.
#include "datagen/run_identity.h"

#include <sys/stat.h>

#include <filesystem>

#include "datagen/dataset_files.h"
#include "shared/atomic_file.h"
#include "shared/crc32c.h"
#include "shared/dataset_meta.h"
#include "shared/error.h"
#include "shared/log.h"

namespace convoy::datagen {
namespace {

using nlohmann::json;

json read_run_file(const std::string& path) {
  try {
    return json::parse(read_whole_file(path));
  } catch (const json::exception&) {
    fail_file(path, "is damaged; remove the output folder's contents to start afresh");
  }
}

// Whether the folder holds a batch file or dataset.json: output that a run of other options must
// not be mixed with.
bool has_output(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name != kIndexFile && name != kRunFile && name != kLockFile && is_dataset_file_name(name)) return true;
  }
  return false;
}

}  // namespace

json made_by(const RunOptions& opt) {
  json o = {{"size", opt.size},
            {"channels", opt.channels},
            {"resize", resize_policy_name(opt.resize)},
            {"encoding", encoding_name(opt.encoding)},
            {"per_file", opt.per_file},
            {"seed", opt.seed},
            {"classes", opt.classes_file},
            {"labels", opt.labels_file},
            {"max_pixels", opt.limits.max_pixels},
            {"max_aspect", opt.limits.max_aspect}};
  if (opt.encoding == Encoding::jpeg) o["quality"] = opt.quality;
  if (opt.max_side > 0) o["max_side"] = opt.max_side;
  return {{"tool", "datagen"}, {"version", "0.1.0"}, {"inputs", opt.inputs}, {"options", o}};
}

json input_stamps(const RunOptions& opt) {
  json stamps = json::array();
  for (const auto& in : opt.inputs) {
    struct stat st {};
    if (::stat(in.c_str(), &st) != 0 || S_ISDIR(st.st_mode)) return nullptr;
    stamps.push_back({in, uint64_t(st.st_size), int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec});
  }
  for (const auto* f : {&opt.classes_file, &opt.labels_file})
    if (!f->empty()) {
      const std::string text = read_whole_file(*f);
      stamps.push_back({*f, crc32c(text.data(), text.size())});
    }
  return stamps;
}

std::string saved_index(const RunOptions& opt, const json& stamps) {
  const std::string run_path = join_path(opt.output, kRunFile), index_path = join_path(opt.output, kIndexFile);
  if (stamps.is_null() || !file_exists(run_path) || !file_exists(index_path)) return "";
  const json old = read_run_file(run_path);
  if (old.value("made_by", json()) != made_by(opt) || old.value("stamps", json()) != stamps) return "";
  std::string text = read_whole_file(index_path);
  if (old.value("index_crc32c", uint32_t{0}) != crc32c(text.data(), text.size())) return "";
  return text;
}

void prepare_output(const RunOptions& opt, const std::string& index_text, const json& stamps) {
  const json identity = {{"made_by", made_by(opt)}, {"index_crc32c", crc32c(index_text.data(), index_text.size())}};
  const std::string run_path = join_path(opt.output, kRunFile);
  if (file_exists(run_path) && has_output(opt.output)) {
    json old = read_run_file(run_path);
    old.erase("stamps");
    if (old != identity)
      fail_file(opt.output,
                "holds the output of a different datagen run (inputs, options or input contents "
                "differ); use an empty folder");
    log_info("%s: resuming; batch files whose checksums verify are kept", opt.output.c_str());
  }
  // The run file first: it is what marks the folder as datagen's (datagen/output_folder.h).
  json run = identity;
  run["stamps"] = stamps;
  write_file_atomic(run_path, run.dump(2) + "\n");
  write_file_atomic(join_path(opt.output, kIndexFile), index_text);
}

}  // namespace convoy::datagen
