// The closing files and lines, from the index (the members refused while scanning) and the ranks'
// results (the samples refused while decoding, the files written, the phases).
#include "datagen/run_report.h"

#include <cstdio>
#include <map>
#include <string>

#include "datagen/dataset_files.h"
#include "datagen/member_names.h"
#include "datagen/png_codec.h"
#include "datagen/run_identity.h"
#include "shared/atomic_file.h"
#include "shared/dataset_meta.h"
#include "shared/log.h"
#include "shared/timer.h"

namespace convoy::datagen {
namespace {

// A field escaped as index.tsv's are (\\, \t, \n, \r), so that a line stays one line and a name
// with a tab or a line end can still be told from another.
std::string tsv_field(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '\t' || c == '\n' || c == '\r') out += '\\';
    out += c == '\t' ? 't' : c == '\n' ? 'n' : c == '\r' ? 'r' : c;
  }
  return out;
}

// Every member refused: while scanning (the index's rejects), then while decoding.
void write_rejects(const RunOptions& opt, const InputIndex& index, const RankResult& all) {
  std::string tsv = "input\tmember\treason\n";
  for (const auto& r : index.rejects)
    tsv += tsv_field(r.input) + "\t" + tsv_field(r.member) + "\t" + tsv_field(r.reason) + "\n";
  for (const auto& [id, why] : all.rejects) {
    const IndexEntry& e = index.entries[id];
    tsv += tsv_field(index.inputs[e.input].path) + "\t" + tsv_field(std::string(e.path)) + "\t" + tsv_field(why) + "\n";
  }
  write_file_atomic(join_path(opt.output, kRejectsFile), tsv);
}

DatasetMeta dataset_meta(const RunOptions& opt, const InputIndex& index, const RunEnd& end) {
  DatasetMeta meta;
  meta.classes = index.classes;
  meta.class_counts = end.sums.class_counts;
  meta.num_samples = end.sums.samples;
  meta.shape = opt.shape();
  meta.encoding = opt.encoding;
  meta.per_file = opt.per_file;
  meta.mean = end.sums.mean();
  meta.std = end.sums.stddev();
  meta.skipped = index.skipped;
  meta.made_by = made_by(opt);
  // A mean image needs one shape; where sizes vary there is none.
  if (!opt.varied()) meta.mean_image = kMeanImageFile;
  if (opt.varied()) meta.resize = {true, uint32_t(opt.size), uint32_t(opt.max_side)};
  for (const auto& f : end.all.files) meta.files.push_back(f.second);
  meta.rejected = index.rejects.size() + end.all.rejects.size();
  return meta;
}

std::string gpu_state(const GpuLanes* lanes) {
  if (!lanes || !lanes->started()) return "not started";
  if (lanes->device() < 0) return "started, not ready";
  char buf[64];
  std::snprintf(buf, sizeof buf, "CUDA device %d, ready after %.2f s", lanes->device(), lanes->ready_seconds());
  return buf;
}

void log_phases(const RunOptions& opt, const RunEnd& end) {
  const Phases& sum = end.all.phases;
  log_info(
      "phases, seconds summed over threads and ranks: read %.2f, decode %.2f, resize %.2f, encode %.2f, "
      "stats %.2f, assemble %.2f, write %.2f, wait %.2f; steps, wall seconds on rank 0: %s",
      sum.read, sum.decode, sum.resize, sum.encode, sum.stats, sum.assemble, sum.write, sum.wait,
      end.steps.text().c_str());
  if (opt.gpu_resize)
    log_info(
        "GPU phases, seconds summed over threads and ranks: stage %.2f, upload %.2f, kernel %.2f, download %.2f, "
        "wait %.2f; images resized on the GPU %.0f, on the CPU %.0f (rank 0's GPU: %s)",
        sum.gpu_stage, sum.gpu_upload, sum.gpu_kernel, sum.gpu_download, sum.gpu_wait, sum.gpu_images, sum.cpu_images,
        gpu_state(end.lanes).c_str());
}

}  // namespace

void log_run_end(const RunOptions& opt, const InputIndex& index, const DatasetMeta& meta, const RunEnd& end) {
  const double secs = end.steps.total();
  log_info(
      "wrote %zu batch files (%d kept from an earlier run), %llu samples, %llu rejected (see %s), %llu skipped, "
      "in %.2f s (%.0f images/s)",
      meta.files.size(), end.all.kept, (unsigned long long)meta.num_samples, (unsigned long long)meta.rejected,
      kRejectsFile, (unsigned long long)meta.skipped, secs, secs > 0 ? double(meta.num_samples) / secs : 0.0);
  log_phases(opt, end);
  for (const auto& in : index.inputs)
    if (!in.complete) std::fprintf(stderr, "datagen: error: incomplete input: %s\n", in.error.c_str());
  if (end.status) log_info("the dataset holds every member that could be read; the run is incomplete (exit status 2)");
}

DatasetMeta finish_dataset(const RunOptions& opt, const InputIndex& index, const RunEnd& end) {
  Stopwatch w;
  DatasetMeta meta = dataset_meta(opt, index, end);
  write_rejects(opt, index, end.all);
  if (!opt.varied())
    write_file_atomic(join_path(opt.output, kMeanImageFile),
                      png_encode(end.sums.mean_image().data(), opt.size, opt.size, opt.channels));
  meta.timings = {{"ranks", end.ranks},
                  {"threads", end.threads},
                  {"seconds", end.steps.total() + w.seconds()},
                  {"scan_seconds", end.scan_seconds},
                  {"steps", end.steps.to_json()},
                  {"phases", end.all.phases.to_json(opt.gpu_resize)},
                  {"kept_files", end.all.kept},
                  {"gpu_resize", opt.gpu_resize}};
  if (meta.num_samples > 0) write_dataset_meta(opt.output, meta);  // a dataset of no sample is none
  return meta;
}

std::string nothing_decoded(const InputIndex& index, const RankResult& all) {
  std::map<std::string, std::pair<uint64_t, uint64_t>> reasons;  // reason: count, first sample id
  for (const auto& [id, why] : all.rejects) {
    auto& [count, first] = reasons[why];
    if (count++ == 0) first = id;
  }
  std::string out = "no image of the " + std::to_string(index.entries.size()) + " indexed could be decoded";
  for (const auto& [why, seen] : reasons) {
    const IndexEntry& e = index.entries[seen.second];
    out += "; " + std::to_string(seen.first) + ": " + why + " (the first: '" + printable(std::string(e.path)) +
           "' in " + index.inputs[e.input].path + ")";
  }
  return out + "; no dataset.json was written (rejects.tsv lists every member)";
}

}  // namespace convoy::datagen
