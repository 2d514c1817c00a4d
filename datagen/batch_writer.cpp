// The writer threads take submitted batch files in order; every file written frees a place and
// wakes whoever waits for one. The first error (a write that failed, or stop()) ends the writers
// and is thrown to the threads that begin, submit or finish after it.
#include "datagen/batch_writer.h"

#include <algorithm>

#include "datagen/dataset_files.h"
#include "datagen/timeline.h"
#include "shared/atomic_file.h"
#include "shared/error.h"
#include "shared/timer.h"

namespace convoy::datagen {

namespace {

// The file's bytes, then its fsync and rename, each a span of the timeline.
void write_durably(const std::string& path, const Batch& batch) {
  Laps lap;
  AtomicFile f(path);
  write_batch(f, batch);
  lap(Span::write);
  f.commit();
  lap(Span::fsync);
}

}  // namespace

size_t batch_files_in_memory(double file_bytes, int threads) {
  return std::clamp<size_t>(size_t(8.0 * double(1ull << 30) / std::max(1.0, file_bytes)), 2,
                            2 + size_t(threads + 1) / 2);
}

BatchWriter::BatchWriter(std::string dir, size_t in_memory, int writers)
    : dir_(std::move(dir)), in_memory_(std::max<size_t>(2, in_memory)) {
  for (int i = 0; i < std::max(1, writers); ++i)
    threads_.emplace_back([this, i] {
      Timeline::name_thread("writer " + std::to_string(i), 500 + i);
      write_loop();
    });
}

BatchWriter::~BatchWriter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  changed_.notify_all();
  for (auto& t : threads_) t.join();
}

void BatchWriter::throw_if_failed() {
  if (!error_.empty()) throw Error(error_);
}

std::vector<uint8_t> BatchWriter::begin_file(const std::function<void()>& before_wait) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto may = [&] { return held_ < in_memory_ || !error_.empty(); };
  if (!may() && before_wait) {
    lock.unlock();
    before_wait();
    lock.lock();
  }
  changed_.wait(lock, may);
  throw_if_failed();
  ++held_;
  if (spare_.empty()) return {};
  std::vector<uint8_t> buffer = std::move(spare_.back());
  spare_.pop_back();
  return buffer;
}

void BatchWriter::submit(uint64_t b, Batch batch, bool kept) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    throw_if_failed();
    queue_.push_back({b, std::move(batch), kept});
  }
  changed_.notify_all();
}

void BatchWriter::stop(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.empty()) error_ = why;
  }
  changed_.notify_all();
}

std::vector<std::pair<uint64_t, BatchFileEntry>> BatchWriter::take_written() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(written_, {});
}

void BatchWriter::finish() {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait(lock, [&] { return held_ == 0 || !error_.empty(); });
  throw_if_failed();
}

double BatchWriter::write_seconds() {
  std::lock_guard<std::mutex> lock(mu_);
  return write_seconds_;
}

void BatchWriter::write_loop() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      changed_.wait(lock, [&] { return stopping_ || !error_.empty() || !queue_.empty(); });
      if (stopping_ || !error_.empty()) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    const std::string name = batch_file_name(job.b), path = join_path(dir_, name);
    std::string error;
    BatchFileEntry entry;
    Stopwatch w;
    try {
      if (!job.kept) write_durably(path, job.batch);
      const BatchHeader h = read_batch_header(path);
      entry = {name, uint32_t(job.batch.count()), h.file_bytes, h.header_crc};
    } catch (const std::exception& e) {
      error = e.what();
    }
    const double seconds = job.kept ? 0.0 : w.seconds();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error.empty() && error_.empty()) error_ = error;
      if (error.empty()) written_.emplace_back(job.b, std::move(entry));
      write_seconds_ += seconds;
      if (spare_.size() < in_memory_) spare_.push_back(std::move(job.batch.images));
      --held_;
    }
    changed_.notify_all();
  }
}

}  // namespace convoy::datagen
