// Work is taken in one place (take_and_do), a file is finished in one place (finish_file, by
// the thread whose sample was its last), and handed to a writer there or, kept, in begin_file.
#include "datagen/file_maker_thread.h"

#include "datagen/timeline.h"
#include "shared/crc32c.h"

namespace convoy::datagen {
namespace {
// Taking work or a place in memory shorter than this did not block: no span for it.
constexpr double kShortestWait = 20e-6;
}  // namespace

void FileMaker::Round::fail(const std::exception& e) {
  {
    std::lock_guard<std::mutex> lock(fatal_mu);
    if (fatal.empty()) fatal = e.what();
  }
  queue.stop();
  writer.stop(e.what());
}

FileMaker::Thread::Thread(FileMaker& maker, Round& round, int tid, Phases& t)
    : maker_(maker), round_(round), tid_(tid), t_(t),
      pixels_(maker.opt_.encoding == Encoding::jpeg && !maker.opt_.varied() ? maker.shape_.bytes() : 0),
      deliver_([this](size_t tag, const uint8_t* pixels) { deliver(tag, pixels); }), flush_([this] { flush_lane(); }) {}

void FileMaker::Thread::run() {
  if (tid_ > 0) Timeline::name_thread("decoding thread " + std::to_string(tid_), tid_);
  for (bool more = true; more;) {
    try {
      more = take_and_do();
    } catch (const std::exception& e) {
      round_.fail(e);
    }
  }
  try {
    flush_lane();
    add_lane_times();
  } catch (const std::exception& e) {
    round_.fail(e);
  }
}

bool FileMaker::Thread::take_and_do() {
  if (tid_ == 0) report_written(round_.writer, round_.report);
  ScopedSpan taking(Span::wait, kShortestWait);
  const WorkQueue::Item item = round_.queue.next(flush_);
  taking.end();
  if (item.kind == WorkQueue::Item::begin) begin_file(item.file);
  if (item.kind == WorkQueue::Item::sample) make_sample(item.file, item.slot);
  return item.kind != WorkQueue::Item::none;
}

// A place among the files held in memory first (the writer bounds them); then the file is kept
// from an earlier run, going straight to the writer, or set up for its samples.
void FileMaker::Thread::begin_file(size_t file) {
  ScopedSpan room(Span::wait, kShortestWait);
  FileBuffer buffer = round_.writer.begin_file(flush_);
  room.end();
  const uint64_t b = round_.files[file];
  std::vector<uint64_t> ids = maker_.planned(b);
  if (maker_.keep(b, ids, round_.writer, buffer, t_)) {
    round_.queue.begun(file, 0);
    return;
  }
  round_.jobs[file] = std::make_unique<FileJob>(b, std::move(ids), std::move(buffer), maker_.shape_,
                                                maker_.opt_.encoding, &round_.writer, &maker_.append_);
  round_.queue.begun(file, round_.jobs[file]->samples());
}

void FileMaker::Thread::make_sample(size_t file, size_t slot) {
  if (!lane_ && maker_.lanes_ && (lane_ = maker_.lanes_->get(tid_))) lane_before_ = lane_->times();
  FileJob& f = *round_.jobs[file];
  SlotOut out = f.slot(slot);
  if (out.dims)
    out.pixels = &pixels_;
  else if (out.encoded)
    out.raw = pixels_.data();
  std::string reason;
  if (!lane_) {
    reason = maker_.samples_.make(f.id(slot), out, t_);
  } else if (maker_.samples_.route(f.id(slot), out, (uint64_t(file) << 32) | slot, *lane_, deliver_, reason, t_)) {
    return;  // on the GPU: done when delivered
  }
  if (reason.empty() && out.dims) {
    add_to_stats(f.id(slot), pixels_.data(), nullptr, t_.cpu_images,
                 size_t(out.dims[0]) * out.dims[1] * maker_.opt_.channels);
  } else if (reason.empty()) {
    add_to_stats(f.id(slot), out.raw, out.crc, t_.cpu_images);
  } else {
    f.reject(slot, std::move(reason));
  }
  judge_gpu(sample_done(file, slot));
}

bool FileMaker::Thread::sample_done(size_t file, size_t slot) {
  if (!round_.jobs[file]->sample_done(slot)) return false;
  finish_file(file);
  return true;
}

void FileMaker::Thread::finish_file(size_t file) {
  ScopedSpan w(Span::assemble);
  const std::unique_ptr<FileJob> f = std::move(round_.jobs[file]);
  std::vector<std::pair<uint64_t, std::string>> rejected;
  MadeFile made = f->assemble(maker_.index_, rejected);
  maker_.add_rejects(rejected);
  round_.writer.submit(std::move(made));
  t_.assemble += w.end();
}

void FileMaker::Thread::deliver(size_t tag, const uint8_t* pixels) {
  const size_t file = tag >> 32, slot = tag & 0xffffffffu;
  FileJob& f = *round_.jobs[file];
  const SlotOut out = f.slot(slot);
  maker_.samples_.place_resized(pixels, out, t_);
  add_to_stats(f.id(slot), pixels, out.crc, t_.gpu_images);
  sample_done(file, slot);
}

void FileMaker::Thread::flush_lane() {
  if (!lane_) return;
  ScopedSpan w(Span::gpu);
  lane_->drain(deliver_);
}

void FileMaker::Thread::add_to_stats(uint64_t id, const uint8_t* pixels, uint32_t* crc, double& path, size_t bytes) {
  path += 1;
  Laps lap;
  if (bytes == 0) bytes = maker_.shape_.bytes();
  if (crc) {
    *crc = crc32c(pixels, bytes);
    t_.assemble += lap(Span::assemble);
  }
  maker_.stats_.add(id, pixels, bytes);
  t_.stats += lap(Span::stats);
}

void FileMaker::Thread::judge_gpu(bool finished_a_file) {
  if (!round_.judged.load(std::memory_order_relaxed) && t_.cpu_images > 0 &&
      (finished_a_file || t_.cpu_images >= kRouteSamples) && !round_.judged.exchange(true))
    maker_.start_gpu_if_it_pays(t_.resize, t_.cpu_images, round_.files, round_.queue.files_begun());
}

void FileMaker::Thread::add_lane_times() {
  if (!lane_) return;
  const GpuResizeTimes d = lane_->times();
  t_.gpu_stage += d.stage_s - lane_before_.stage_s;
  t_.gpu_upload += d.upload_s - lane_before_.upload_s;
  t_.gpu_kernel += d.kernel_s - lane_before_.kernel_s;
  t_.gpu_download += d.download_s - lane_before_.download_s;
  t_.gpu_wait += d.wait_s - lane_before_.wait_s;
}

}  // namespace convoy::datagen
