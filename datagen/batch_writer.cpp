// The writer threads take parts and files in the order they came, but one file's at a time: on
// tmpfs (and any file system that locks an inode for a buffered write) writers of one file queue
// behind each other, which cost 1 x 16 ranks x threads 3-7 times the write time of 4 x 4 on the
// H200 host; other files go to the other writers. Every file written frees a place and wakes whoever
// waits for one. The first error (a write that failed, or stop()) ends
// the writers and is thrown to the threads that begin, submit or finish after it.
#include "datagen/batch_writer.h"

#include <algorithm>
#include <cstring>

#include "datagen/dataset_files.h"
#include "datagen/timeline.h"
#include "shared/atomic_file.h"
#include "shared/error.h"
#include "shared/timer.h"

namespace convoy::datagen {

namespace {

// dataset.json's entry of a batch file, from its header as the disk holds it.
BatchFileEntry entry_on_disk(const std::string& name, const std::string& path) {
  const BatchHeader h = read_batch_header(path);
  return {name, h.count, h.file_bytes, h.header_crc};
}

}  // namespace

size_t batch_files_in_memory(double file_bytes, int threads) {
  const size_t most = threads >= 8 ? 4 : threads > 1 ? 3 : 2;
  return std::clamp<size_t>(size_t(8.0 * double(1ull << 30) / std::max(1.0, file_bytes)), 2, most);
}

int batch_writers(int threads) { return std::clamp(threads / 4, 2, 4); }

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

void BatchWriter::add_spare(std::vector<FileBuffer> buffers) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = buffers.rbegin(); it != buffers.rend(); ++it) spare_.push_back(std::move(*it));  // the first first
}

std::vector<FileBuffer> BatchWriter::take_spare() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(spare_, {});
}

FileBuffer BatchWriter::begin_file(const std::function<void()>& before_wait) {
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
  FileBuffer buffer = std::move(spare_.back());
  spare_.pop_back();
  return buffer;
}

void BatchWriter::push(Job job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    throw_if_failed();
    if (job.kind == Job::part) ++open_[job.b].in_flight;
    queue_.push_back(std::move(job));
  }
  changed_.notify_all();
}

void BatchWriter::write_part(uint64_t b, const uint8_t* file, uint64_t offset, uint64_t n) {
  Job job;
  job.kind = Job::part;
  job.b = b, job.data = file, job.offset = offset, job.bytes = n;
  push(std::move(job));
}

void BatchWriter::submit(MadeFile file) {
  Job job;
  job.b = file.b;
  job.file = std::move(file);
  push(std::move(job));
}

void BatchWriter::submit(uint64_t b, const Batch& batch) {
  MadeFile f;
  f.b = b;
  const bool v2 = batch.version == kBatchVersion2;
  f.header = batch_layout(batch.shape, batch.encoding, batch.batch_index, batch.count(), batch.images.size(),
                          batch.version);
  f.bytes.reserve(f.header.file_bytes);
  if (!batch.images.empty())
    std::memcpy(f.bytes.data() + f.header.images_offset, batch.images.data(), batch.images.size());
  seal_batch_in_place(f.bytes.data(), f.header, batch.labels.data(), batch.ids.data(),
                      batch.encoding == Encoding::jpeg || v2 ? batch.offsets.data() : nullptr, nullptr,
                      v2 ? batch.dims.data() : nullptr);
  submit(std::move(f));
}

void BatchWriter::submit_kept(uint64_t b, FileBuffer unused) {
  Job job;
  job.kind = Job::kept;
  job.b = b;
  job.file.bytes = std::move(unused);
  push(std::move(job));
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

std::shared_ptr<AtomicFile> BatchWriter::open_file(uint64_t b) {
  Open& o = open_[b];
  if (!o.file) o.file = std::make_shared<AtomicFile>(join_path(dir_, batch_file_name(b)));
  return o.file;
}

void BatchWriter::write_part_now(const Job& job) {
  std::shared_ptr<AtomicFile> file;
  {
    std::lock_guard<std::mutex> lock(mu_);
    file = open_file(job.b);
  }
  ScopedSpan span(Span::write);
  file->pwrite_direct(job.data + job.offset, job.bytes, job.offset);
}

// The parts in flight are waited for first: they read the file's memory, and a file whose layout
// changed after its parts (a sample rejected late) is written anew into a fresh temporary.
void BatchWriter::write_made(MadeFile& f, BatchFileEntry& entry) {
  const std::string name = batch_file_name(f.b), path = join_path(dir_, name);
  std::shared_ptr<AtomicFile> file;
  {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait(lock, [&] { return !open_.count(f.b) || open_[f.b].in_flight == 0 || !error_.empty(); });
    throw_if_failed();
    if (auto it = open_.find(f.b); it != open_.end()) {
      file = std::move(it->second.file);
      open_.erase(it);
    }
  }
  const bool parts = f.parts_to > f.parts_from;
  if (!parts) file.reset();  // removes the temporary of parts that no longer fit
  if (!file) file = std::make_shared<AtomicFile>(path);
  Laps lap;
  const uint64_t end = direct_aligned(f.header.file_bytes);
  if (parts) {
    file->pwrite_direct(f.bytes.data(), f.parts_from, 0);
    file->pwrite_direct(f.bytes.data() + f.parts_to, end - f.parts_to, f.parts_to);
  } else {
    file->pwrite_direct(f.bytes.data(), end, 0);
  }
  if (end != f.header.file_bytes) file->resize(f.header.file_bytes);
  lap(Span::write);
  file->commit();
  lap(Span::fsync);
  entry = entry_on_disk(name, path);
}

void BatchWriter::do_job(Job& job, BatchFileEntry& entry) {
  if (job.kind == Job::part) return write_part_now(job);
  if (job.kind == Job::made) return write_made(job.file, entry);
  const std::string name = batch_file_name(job.b);
  entry = entry_on_disk(name, join_path(dir_, name));
}

std::deque<BatchWriter::Job>::iterator BatchWriter::next_job() {
  return std::find_if(queue_.begin(), queue_.end(), [&](const Job& j) { return !writing_.count(j.b); });
}

void BatchWriter::write_loop() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      changed_.wait(lock, [&] { return stopping_ || !error_.empty() || next_job() != queue_.end(); });
      if (stopping_ || !error_.empty()) return;
      const auto it = next_job();
      job = std::move(*it);
      queue_.erase(it);
      writing_.insert(job.b);
    }
    std::string error;
    BatchFileEntry entry;
    Stopwatch w;
    try {
      do_job(job, entry);
    } catch (const std::exception& e) {
      error = e.what();
    }
    const double seconds = job.kind == Job::kept ? 0.0 : w.seconds();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error.empty() && error_.empty()) error_ = error;
      write_seconds_ += seconds;
      writing_.erase(job.b);
      if (job.kind == Job::part) {
        --open_[job.b].in_flight;
      } else {
        if (error.empty()) written_.emplace_back(job.b, std::move(entry));
        if (job.file.bytes.capacity() && spare_.size() < in_memory_) spare_.push_back(std::move(job.file.bytes));
        --held_;
      }
    }
    changed_.notify_all();
  }
}

}  // namespace convoy::datagen
