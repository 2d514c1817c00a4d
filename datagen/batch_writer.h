// A rank's batch-file writers: finished batch files are written (temporary name, fsync, rename) on
// threads of their own, several at once, so decoding never waits for a write; parts of a file
// whose bytes are final may be written while its other samples are still being made, so that the
// disk is busy from the first samples on and a file's end leaves little to write; and a bound on
// how many batch files the rank holds in memory, made, waiting or being written, at any time.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "datagen/file_buffer.h"
#include "shared/atomic_file.h"
#include "shared/batch_file.h"
#include "shared/dataset_meta.h"

namespace convoy::datagen {

// How many batch files of `file_bytes` a rank of `threads` threads holds at once: the one being
// made and the one before, whose last part and fsync may still be under way (the rest of it was
// written while it was made); with several threads one more, begun while the last samples of the
// one being made are still in other threads' hands, and with 8 or more another, for the jitter of
// the disk. Fewer when they are large, so that they stay within 8 GiB (a file is at most 4 GiB).
// Few files also means little memory touched for the first time, which costs about as much per
// byte as writing it to the disk does (75 us per 196 KB sample on the 2-core VM).
size_t batch_files_in_memory(double file_bytes, int threads);
// Writer threads: enough that parts of a file go to the disk while the file before is made durable.
int batch_writers(int threads);

// A batch file made in memory and sealed (seal_batch_in_place): its whole bytes as on disk. Bytes
// [parts_from, parts_to) of it went to the writer already as parts (none when they are equal).
struct MadeFile {
  uint64_t b = 0;
  FileBuffer bytes;
  BatchHeader header{};
  uint64_t parts_from = 0, parts_to = 0;
};

class BatchWriter {
 public:
  // dir: the output folder; in_memory: batch files held at most (at least 2); writers: threads
  // writing at once.
  BatchWriter(std::string dir, size_t in_memory, int writers);
  ~BatchWriter();  // stops and joins the writers; unwritten files are dropped
  BatchWriter(const BatchWriter&) = delete;
  BatchWriter& operator=(const BatchWriter&) = delete;

  // Memory for the files to come (begin_file() hands it out first).
  void add_spare(std::vector<FileBuffer> buffers);
  // The memory of written files, for whoever frees it (after finish()).
  std::vector<FileBuffer> take_spare();
  // Waits until one more batch file may be held; returns memory for it, that of a written file
  // when there is one (its pages are already mapped), of whatever size and contents it had.
  // Every begin_file() is followed by one submit() or submit_kept(), unless the run fails. Throws
  // the error that stopped the writers, if any. before_wait (if any) is called, without the
  // lock, before it blocks: a thread must first finish what the held files wait for.
  FileBuffer begin_file(const std::function<void()>& before_wait = {});
  // Batch file b's bytes [offset, offset + n) of `file`, final already, written while the rest
  // of the file is made. offset and n are multiples of AtomicFile::kDirectAlign; `file` stays
  // put until the file is submitted. Every part comes before the file's submit().
  void write_part(uint64_t b, const uint8_t* file, uint64_t offset, uint64_t n);
  // Batch file b, made: written whole, or what its parts did not cover, then made durable.
  void submit(MadeFile file);
  // The same from a Batch (its bytes laid out here).
  void submit(uint64_t b, const Batch& batch);
  // Batch file b, kept: on disk already and verified, only its header is read for the entry;
  // `unused`: the memory begin_file() gave for it.
  void submit_kept(uint64_t b, FileBuffer unused = {});
  // The run fails: the writers stop, and begin_file(), submit() and finish() throw `why`.
  void stop(const std::string& why);
  // The files written since the last call, with their dataset.json entries.
  std::vector<std::pair<uint64_t, BatchFileEntry>> take_written();
  // Waits until every begun file is written; throws the error that stopped the writers, if any.
  void finish();
  double write_seconds();  // summed over the writer threads

 private:
  struct Job {
    enum Kind { part, made, kept } kind = made;
    uint64_t b = 0;
    const uint8_t* data = nullptr;   // part: the file's bytes
    uint64_t offset = 0, bytes = 0;  // part: the range
    MadeFile file;                   // made
  };
  // A file with parts written or being written: its temporary file and the parts in flight.
  struct Open {
    std::shared_ptr<AtomicFile> file;
    int in_flight = 0;
  };
  void write_loop();
  // The first job in the queue whose file no writer has in hand, or end(); with mu_ held.
  std::deque<Job>::iterator next_job();
  void push(Job job);
  void do_job(Job& job, BatchFileEntry& entry);
  // The open temporary file of batch file b (made on first use); with mu_ held.
  std::shared_ptr<AtomicFile> open_file(uint64_t b);
  void write_part_now(const Job& job);
  void write_made(MadeFile& f, BatchFileEntry& entry);
  void throw_if_failed();  // with mu_ held

  const std::string dir_;
  const size_t in_memory_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<Job> queue_;                 // submitted, not yet taken by a writer
  std::unordered_set<uint64_t> writing_;  // files a writer has a job of in hand
  std::unordered_map<uint64_t, Open> open_;
  size_t held_ = 0;  // begun and not yet written
  std::vector<FileBuffer> spare_;
  std::vector<std::pair<uint64_t, BatchFileEntry>> written_;
  std::string error_;
  double write_seconds_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace convoy::datagen
