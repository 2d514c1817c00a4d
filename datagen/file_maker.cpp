// The parallel region and what its threads call back for: the plan's samples of a file, keeping a
// file from an earlier run, the rejects, and the judgement whether the GPU pays for its start-up.
#include "datagen/file_maker.h"

#include <omp.h>

#include <algorithm>

#include "datagen/file_maker_thread.h"
#include "datagen/timeline.h"
#include "shared/error.h"
#include "shared/log.h"
#include "shared/timer.h"

namespace convoy::datagen {

FileMaker::FileMaker(const RunOptions& opt, const InputIndex& index, const Plan& plan, const SampleSource& source,
                     int threads, GpuLanes* lanes, int rank, int sharing)
    : opt_(opt), index_(index), plan_(plan), threads_(threads), shape_(opt.shape()), lanes_(lanes), rank_(rank),
      sharing_(std::max(1, sharing)), samples_(opt, source), append_(shape_.bytes()), keeper_(opt, index, samples_),
      stats_(index, shape_, threads) {}

void FileMaker::run(const std::vector<uint64_t>& files, BatchWriter& writer, const Report& report) {
  make_files(files, writer, report);
  report_written(writer, report);
}

void FileMaker::drain(BatchWriter& writer, const Report& report) {
  writer.finish();
  report_written(writer, report);
}

Phases FileMaker::phases(BatchWriter& writer) const {
  Phases p = phases_;
  p.write = writer.write_seconds();
  return p;
}

void FileMaker::make_files(const std::vector<uint64_t>& files, BatchWriter& writer, const Report& report) {
  Round round(files, writer, report, !lanes_ || lanes_->started());
  std::vector<Phases> per_thread(static_cast<size_t>(threads_));
  Stopwatch wall;
#pragma omp parallel num_threads(threads_)
  {
    const int tid = omp_get_thread_num();
    Thread(*this, round, tid, per_thread[size_t(tid)]).run();
  }
  region_s_ = wall.seconds();
  if (!round.fatal.empty()) fail(round.fatal);
  Phases sum;
  for (const auto& t : per_thread) sum += t;
  sum.wait = std::max(0.0, region_s_ * threads_ - sum.busy());
  phases_ += sum;
}

void FileMaker::report_written(BatchWriter& writer, const Report& report) {
  for (const auto& [b, e] : writer.take_written()) report(b, e);
}

std::vector<uint64_t> FileMaker::planned(uint64_t b) const {
  return {plan_.order.begin() + long(plan_.file_begin(b)), plan_.order.begin() + long(plan_.file_end(b))};
}

bool FileMaker::keep(uint64_t b, const std::vector<uint64_t>& ids, BatchWriter& writer, FileBuffer& buffer, Phases& t) {
  std::optional<KeptFile> kept = keeper_.check(b, ids, t);
  if (!kept) return false;
  Laps lap;
  stats_.add(kept->sums);
  t.stats += lap(Span::stats);
  {
    std::lock_guard<std::mutex> lock(rejects_mu_);
    rejects_.insert(rejects_.end(), kept->missing.begin(), kept->missing.end());
    ++kept_;
  }
  writer.submit_kept(b, std::move(buffer));
  return true;
}

void FileMaker::add_rejects(const std::vector<std::pair<uint64_t, std::string>>& rejected) {
  std::lock_guard<std::mutex> lock(rejects_mu_);
  rejects_.insert(rejects_.end(), rejected.begin(), rejected.end());
}

// The GPU can save at most the CPU's resize time, while starting it costs CUDA's start-up and
// the pinned allocations (tenths of a second), and the process's exit pays again to release
// them. Ranks sharing a GPU each pay that, and their batches take turns on it: two and four
// ranks on one H100 came out 5-7 % slower than the CPU path where each rank expected to save
// 0.5-0.7 s. So the automatic route starts the GPU only if the resize time left, per thread, is
// at least --gpu-min-saving seconds times the ranks sharing the GPU. A thread that resized
// `images` in `resize_s` seconds judges, for the files from `next` on.
bool FileMaker::start_gpu_if_it_pays(double resize_s, double images, const std::vector<uint64_t>& files, size_t next) {
  uint64_t left = 0;
  for (size_t i = next; i < files.size(); ++i) left += plan_.file_end(files[i]) - plan_.file_begin(files[i]);
  const double saving = resize_s / images * double(left) / threads_, needed = opt_.gpu_min_saving * sharing_;
  if (saving < needed) {
    log_all(
        "rank %d: --gpu-resize: resizing the %llu images left would take about %.2f s per thread, less than "
        "the %.2f s the GPU must save to pay for starting it (%.2f s x %d rank%s per GPU); the CPU resizes "
        "them (--gpu-route always overrides)",
        rank_, (unsigned long long)left, saving, needed, opt_.gpu_min_saving, sharing_, sharing_ > 1 ? "s" : "");
    return false;
  }
  log_all("rank %d: --gpu-resize: starting the GPU (about %.2f s of resize work left per thread)", rank_, saving);
  lanes_->start();
  return true;
}

}  // namespace convoy::datagen
