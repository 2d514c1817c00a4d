// The checks of a run's options, each failure one line naming the flag or the file, in the order
// a user would fix them: required flags, values, then the files themselves.
#include "datagen/run_options.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "datagen/gpu_resize.h"
#include "datagen/member_names.h"
#include "shared/error.h"

namespace convoy::datagen {
namespace {

// The same file or folder given twice (by any name), or an input inside a folder input: its images
// would be taken twice.
void refuse_overlapping_inputs(const std::vector<std::string>& inputs) {
  namespace fs = std::filesystem;
  std::vector<fs::path> real;
  for (const auto& in : inputs) {
    std::error_code ec;
    real.push_back(fs::canonical(in, ec));
    if (ec) fail_file(in, "input cannot be resolved: " + ec.message());
  }
  for (size_t i = 0; i < real.size(); ++i)
    for (size_t j = 0; j < real.size(); ++j) {
      if (i == j) continue;
      if (j > i && real[i] == real[j])
        fail("--input " + inputs[j] + " is --input " + inputs[i] + " again: its images would be taken twice");
      const std::string a = real[i].string() + "/", b = real[j].string();
      if (b.compare(0, a.size(), a) == 0)
        fail("--input " + inputs[j] + " is inside --input " + inputs[i] + ": its images would be taken twice");
    }
}

}  // namespace

size_t RunOptions::max_sample_bytes() const {
  if (!varied()) return shape().bytes();
  const double longest = max_side > 0 ? double(max_side) : std::ceil(double(size) * limits.max_aspect) + 1;
  return size_t(size) * size_t(longest) * size_t(channels);
}

size_t RunOptions::typical_sample_bytes() const {
  if (!varied()) return shape().bytes();
  const size_t longest = max_side > 0 ? std::min<size_t>(size_t(max_side), size_t(size) * 4 / 3) : size_t(size) * 4 / 3;
  return size_t(size) * longest * size_t(channels);
}

void validate_run_options(const RunOptions& opt) {
  if (opt.inputs.empty()) fail("--input is required (a tar, a compressed tar or a folder; may be given several times)");
  if (opt.output.empty()) fail("--output is required (the dataset folder to write)");
  if (opt.size < 1 || opt.size > 16384) fail("--size must be between 1 and 16384, not " + std::to_string(opt.size));
  if (opt.channels != 1 && opt.channels != 3) fail("--channels must be 1 or 3, not " + std::to_string(opt.channels));
  if (opt.per_file < 1) fail("--per-file must be at least 1");
  // A rank holds at least two batch files in memory (one being written, one being made).
  const double batch_gib = double(opt.per_file) * double(opt.typical_sample_bytes()) / double(1ull << 30);
  if (batch_gib > 4.0)
    fail("--per-file " + std::to_string(opt.per_file) + " at --size " + std::to_string(opt.size) +
         " makes batch files of " + std::to_string(int(batch_gib)) +
         " GiB; each rank holds at least two in memory, so use a smaller --per-file (at most 4 GiB each)");
  if (opt.threads < 0) fail("--threads must be 0 (automatic) or more");
  if (opt.writers < 0) fail("--writers must be 0 (automatic) or more");
  if (opt.files_in_memory < 0) fail("--files-in-memory must be 0 (automatic) or more");
  if (opt.max_side != 0 && !opt.varied()) fail("--max-side applies to --resize short:S only");
  if (opt.max_side != 0 && (opt.max_side < opt.size || opt.max_side > 65536))
    fail("--max-side must be between the short side " + std::to_string(opt.size) + " and 65536, not " +
         std::to_string(opt.max_side));
  if (opt.varied() && opt.gpu_resize)
    fail("--gpu-resize makes square samples only; --resize short:S resizes on the CPU (leave out --gpu-resize)");
  if (opt.encoding == Encoding::jpeg && (opt.quality < 1 || opt.quality > 100))
    fail("--quality must be between 1 and 100, not " + std::to_string(opt.quality));
  if (opt.limits.max_pixels < 1) fail("--max-pixels must be at least 1");
  if (opt.limits.max_aspect < 1) fail("--max-aspect must be at least 1");
  if (!(opt.gpu_min_saving >= 0)) fail("--gpu-min-saving must be 0 or more seconds");
  if (opt.gpu_resize) gpu_resize_check_available();
  for (const auto& in : opt.inputs) {
    if (::access(in.c_str(), R_OK) != 0) fail_file(in, "input cannot be read: " + errno_text());
  }
  refuse_overlapping_inputs(opt.inputs);
  // datagen_run.json and dataset.json record these names as text.
  for (const auto& in : opt.inputs)
    if (!is_utf8(in)) fail("--input " + printable(in) + ": the name is not UTF-8 text, which datagen_run.json records");
  for (const auto* f : {&opt.classes_file, &opt.labels_file})
    if (!is_utf8(*f)) fail(printable(*f) + ": the name is not UTF-8 text, which datagen_run.json records");
  for (const auto* f : {&opt.classes_file, &opt.labels_file})
    if (!f->empty() && ::access(f->c_str(), R_OK) != 0) fail_file(*f, "cannot be read: " + errno_text());
  struct stat st {};
  if (::stat(opt.output.c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
    fail_file(opt.output, "--output exists and is not a folder");
}

}  // namespace convoy::datagen
