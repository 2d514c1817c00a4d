// verify / inspect / preview / classes. They read only what the format and dataset.json define,
// so they work on any dataset folder, however it was made.
#include "datagen/dataset_tools.h"

#include <algorithm>
#include <cstdio>
#include <opencv2/imgproc.hpp>
#include <set>
#include <sstream>

#include "datagen/image_codec.h"
#include "datagen/labels.h"
#include "datagen/png_codec.h"
#include "shared/atomic_file.h"
#include "shared/batch_file.h"
#include "shared/dataset_meta.h"
#include "shared/error.h"

namespace convoy::datagen {
namespace {

// Each sample of a file whose sizes vary as dataset.json says they were made: the short side S,
// unless the long side was capped at max_side, and never beyond either.
template <class Bad>
void check_sizes(const Batch& b, const StoredSize& rule, const Bad& bad) {
  for (size_t i = 0; i < b.count(); ++i) {
    const ImageShape s = b.sample_shape(i);
    const uint32_t small = std::min(s.height, s.width), large = std::max(s.height, s.width);
    const bool capped = rule.max_side > 0 && large == rule.max_side && small <= rule.short_side;
    const bool within = rule.max_side == 0 || large <= rule.max_side;
    if (!capped && !(small == rule.short_side && within)) {
      bad("sample " + std::to_string(i) + " is " + std::to_string(s.height) + "x" + std::to_string(s.width) +
          ", not of short side " + std::to_string(rule.short_side) +
          (rule.max_side ? " within long side " + std::to_string(rule.max_side) : std::string()) +
          " as dataset.json says");
      return;
    }
  }
}

}  // namespace

std::vector<std::string> verify_dataset(const std::string& dir) {
  const DatasetMeta meta = read_dataset_meta(dir);
  std::vector<std::string> problems;
  std::vector<uint64_t> counts(meta.classes.size(), 0);
  std::set<int64_t> ids;
  uint64_t samples = 0;
  for (size_t f = 0; f < meta.files.size(); ++f) {
    const BatchFileEntry& e = meta.files[f];
    const std::string path = join_path(dir, e.name);
    Batch b;
    try {
      b = read_batch_file(path);
    } catch (const Error& err) {
      problems.push_back(err.what());
      continue;
    }
    const BatchHeader h = read_batch_header(path);
    auto bad = [&](const std::string& why) { problems.push_back(path + ": " + why); };
    if (h.header_crc != e.crc32c) bad("checksum differs from dataset.json (file replaced?)");
    if (b.count() != e.count)
      bad("holds " + std::to_string(b.count()) + " samples, dataset.json says " + std::to_string(e.count));
    if (h.file_bytes != e.bytes) bad("size differs from dataset.json");
    if (!(b.shape == meta.shape)) bad("image shape differs from dataset.json");
    if (b.encoding != meta.encoding) bad("encoding differs from dataset.json");
    if ((b.version == kBatchVersion2) != meta.resize.varied)
      bad("batch-file version " + std::to_string(b.version) + " does not match dataset.json's format_version");
    else if (meta.resize.varied)
      check_sizes(b, meta.resize, bad);
    for (size_t i = 0; i < b.count(); ++i) {
      if (b.labels[i] < 0 || size_t(b.labels[i]) >= meta.classes.size()) {
        bad("sample " + std::to_string(i) + " has label " + std::to_string(b.labels[i]) + ", outside 0.." +
            std::to_string(meta.classes.size() - 1));
        break;
      }
      ++counts[size_t(b.labels[i])];
      if (!ids.insert(b.ids[i]).second) bad("sample id " + std::to_string(b.ids[i]) + " appears twice in the dataset");
    }
    samples += b.count();
  }
  if (problems.empty()) {
    const std::string json = join_path(dir, kDatasetJson);
    if (samples != meta.num_samples) problems.push_back(json + ": num_samples does not match the batch files");
    if (counts != meta.class_counts) problems.push_back(json + ": class_counts do not match the batch files");
  }
  return problems;
}

namespace {

std::string image_text(const DatasetMeta& m) {
  const std::string c = std::to_string(m.shape.channels);
  if (!m.resize.varied) return std::to_string(m.shape.height) + "x" + std::to_string(m.shape.width) + "x" + c;
  return "whole images, short side " + std::to_string(m.resize.short_side) +
         (m.resize.max_side ? ", long side at most " + std::to_string(m.resize.max_side) : std::string()) +
         ", aspect kept, x" + c + " (batch-file format v2)";
}

}  // namespace

std::string inspect_dataset(const std::string& dir) {
  const DatasetMeta m = read_dataset_meta(dir);
  std::ostringstream out;
  uint64_t bytes = 0;
  for (const auto& f : m.files) bytes += f.bytes;
  out << "dataset     " << dir << "\n"
      << "samples     " << m.num_samples << " in " << m.files.size() << " batch files (" << m.per_file << " per file), "
      << bytes / (1024.0 * 1024.0) << " MiB\n"
      << "image       " << image_text(m) << ", " << encoding_name(m.encoding) << "\n"
      << "mean / std ";
  for (size_t c = 0; c < m.mean.size(); ++c) out << " " << m.mean[c] << "/" << m.std[c];
  out << "\nrejected    " << m.rejected << ", skipped (not images) " << m.skipped << "\n"
      << "classes     " << m.classes.size() << "\n";
  for (size_t c = 0; c < m.classes.size() && c < 20; ++c)
    out << "  " << c << "\t" << m.classes[c] << "\t" << m.class_counts[c] << "\n";
  if (m.classes.size() > 20) out << "  ... " << m.classes.size() - 20 << " more\n";
  out << "made by     " << m.made_by.dump() << "\n";
  out << "timings     " << m.timings.dump() << "\n";
  return out.str();
}

size_t preview_dataset(const std::string& dir, const std::string& out_png, size_t count) {
  const DatasetMeta m = read_dataset_meta(dir);
  if (m.num_samples == 0) fail_file(dir, "holds no samples to preview");
  count = std::min<uint64_t>(std::max<size_t>(count, 1), m.num_samples);
  const int side = int(m.resize.varied ? m.resize.short_side : m.shape.width), tile = std::max(64, side), label_h = 14,
            cols = int(std::ceil(std::sqrt(double(count))));
  const int rows = int((count + size_t(cols) - 1) / size_t(cols));
  cv::Mat sheet(rows * (tile + label_h), cols * tile, CV_8UC3, cv::Scalar(255, 255, 255));
  ImageCodec codec;
  // Samples spread evenly over the dataset (which is shuffled, so this is a random look).
  const uint64_t step = m.num_samples / count;
  size_t shown = 0, file = 0;
  uint64_t file_start = 0;
  Batch b;
  bool loaded = false;
  for (size_t k = 0; k < count; ++k) {
    const uint64_t want = k * step;
    while (want >= file_start + m.files[file].count) {
      file_start += m.files[file].count;
      ++file;
      loaded = false;
    }
    if (!loaded) {
      b = read_batch_file(join_path(dir, m.files[file].name));
      loaded = true;
    }
    const size_t i = size_t(want - file_start);
    cv::Mat img;
    if (b.encoding == Encoding::raw) {
      const ImageShape s = b.sample_shape(i);
      img = cv::Mat(int(s.height), int(s.width), CV_8UC(s.channels), const_cast<uint8_t*>(b.raw_image(i))).clone();
    } else {
      DecodeLimits none;
      img = codec.decode(b.images.data() + b.offsets[i], size_t(b.offsets[i + 1] - b.offsets[i]), int(b.shape.channels),
                         0, none);
    }
    cv::Mat rgb = img;
    if (img.channels() == 1) cv::cvtColor(img, rgb, cv::COLOR_GRAY2RGB);
    const double scale = double(tile) / std::max(rgb.cols, rgb.rows);
    cv::resize(rgb, rgb, cv::Size(), scale, scale, scale >= 1 ? cv::INTER_NEAREST : cv::INTER_AREA);
    const int x = int(k % size_t(cols)) * tile, y = int(k / size_t(cols)) * (tile + label_h);
    rgb.copyTo(sheet(cv::Rect(x, y, rgb.cols, rgb.rows)));
    std::string name = m.classes[size_t(b.labels[i])].substr(0, size_t(tile / 8));
    cv::putText(sheet, name, cv::Point(x + 2, y + tile + label_h - 4), cv::FONT_HERSHEY_PLAIN, 0.8, cv::Scalar(0, 0, 0),
                1);
    ++shown;
  }
  write_file_atomic(out_png, png_encode(sheet.data, sheet.cols, sheet.rows, 3));
  return shown;
}

void write_dataset_classes(const std::string& dir, const std::string& out) {
  write_class_file(out, read_dataset_meta(dir).classes);
}

}  // namespace convoy::datagen
