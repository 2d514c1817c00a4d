// The streaming loader: reader threads read and verify batch files ahead of use, in the order
// the epoch first needs them, and build batches from them into a bounded window of `prefetch`
// batches, a few samples at a time (a part), so that decoding spreads over every reader. Batch k
// is always built from the same samples with the same augmentation, whichever thread builds it.
#pragma once
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "input/augment.h"
#include "input/epoch_plan.h"
#include "input/loaded_file.h"
#include "input/loader_options.h"
#include "input/sample_format.h"
#include "shared/dataset_meta.h"

namespace convoy {

struct HostBatch {
  int n = 0;
  // Each sample's height and width as built: the epoch's crop (which [data] progressive changes from
  // epoch to epoch). 0: the consumer's whole input size (batches made by hand).
  int height = 0, width = 0;
  std::vector<float> x;  // [n, C, H, W], normalised (CPU backend)
  // Raw batches (the CUDA backend mirrors and normalises on the GPU): the cropped and resized
  // samples as uint8 [n, out_h, out_w, C] and whether each is to be mirrored; x stays empty.
  std::vector<uint8_t> pixels;
  std::vector<uint8_t> flips;
  std::vector<int32_t> labels;
  std::vector<uint64_t> keys;  // per-sample keys (dataset ids) for dropout masks
};

// Raw HWC pixels of every sample in batch file number `file` of the dataset in `dir` (JPEG samples
// decoded whole).
struct DecodedFile {
  std::vector<uint8_t> pixels;
  std::vector<int32_t> labels;
  std::vector<int64_t> ids;
};
DecodedFile load_batch_file(const std::string& dir, const DatasetMeta& meta, size_t file);

class Loader {
 public:
  Loader(const LoaderOptions& o, const DatasetMeta& meta);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Starts producing the batches of `epoch` from batch `first` (for resume); in training,
  // steps_per_epoch batches; in evaluation every sample. In training in local order, `plan_ranks`
  // (not 0) makes the epoch follow that many ranks' plan with the same global batch (a run resumed
  // on other ranks; epoch_plan.h; global order has none to follow and ignores it). Once this
  // epoch's files are all read, the readers go on to the first shuffle window of epoch + 1 (memory
  // permitting), which the next start_epoch(epoch + 1) takes over instead of reading them again.
  void start_epoch(int epoch, long long first = 0, int plan_ranks = 0);
  // Files that start_epoch took over already read, so far, and those read ahead for the next
  // epoch now (for tests and logs).
  long long files_taken_over() const { return taken_over_; }
  int files_read_ahead();
  // The batches start_epoch yields in every epoch: in training steps_per_epoch full batches (the
  // same on every rank), in evaluation every sample of this rank's files, the last batch partial;
  // and the samples they hold.
  long long batches_per_epoch() const { return batches_per_epoch_; }
  long long samples_per_epoch() const { return samples_per_epoch_; }
  // The next batch in order; false after the last one of the epoch. `out`'s previous buffers go
  // back to the loader to be filled again, so steady state allocates nothing.
  bool next(HostBatch& out);
  // next() that waits at most `patience` for the batch, so that a caller can attend to other things
  // (a Python caller to its signals) while a batch is late: `waiting` leaves everything as it was.
  enum class Take { batch, end, waiting };
  Take next_for(HostBatch& out, std::chrono::milliseconds patience);
  int prefetch() const { return opt_.prefetch; }
  int readers() const { return opt_.readers; }
  // The most memory the loader's buffers take: max_files() files of the largest size, the prefetch
  // window plus two batches in the consumer's hands, and each reader's decode scratch. An epoch
  // that follows another number of ranks' plan holds more files (from its start_epoch on).
  size_t memory_bound() const;
  int max_files() const { return max_files_; }
  // Each sample's size, channels and normalisation, for a consumer of raw batches. The size is the
  // largest a batch has: with [data] progressive a training epoch's samples may be smaller
  // (HostBatch::height and width say).
  const SampleFormat& sample_format() const { return format_; }
  const DatasetMeta& meta() const { return meta_; }

 private:
  enum class FileState { waiting, loading, ready, failed };
  struct FileSlot {
    FileState state = FileState::waiting;
    long long first_batch = 0;  // the first batch (from the epoch's start point) that uses it
    long long uses_left = 0;    // batches not yet built that use it
    std::unique_ptr<LoadedFile> data;
    std::exception_ptr error;
  };
  struct ReadySlot {
    bool done = false;
    int parts_left = 0;  // parts claimed or not yet claimed that have not finished
    HostBatch batch;
    std::exception_ptr error;
  };

  // This rank's share of `epoch` (epoch_plan.h), following `plan_ranks` ranks' plan (0: its own).
  PlanOptions plan(int epoch, int plan_ranks = 0) const;
  int held_files(int plan_ranks) const;  // max_files_ for an epoch of that plan
  size_t stored_bytes() const;           // one stored sample's bytes, for memory_bound
  void stop();
  void worker();
  // The reader's three kinds of work, each called and returning with mu_ held (released while it
  // works); each returns whether it found something to do.
  bool build_next_part(std::unique_lock<std::mutex>& lk);
  bool load_next_file(std::unique_lock<std::mutex>& lk);
  bool read_ahead(std::unique_lock<std::mutex>& lk);
  std::unique_ptr<LoadedFile> spare_file();  // a recycled file buffer, or a new one
  bool files_ready(long long k) const;
  std::exception_ptr file_error(long long k) const;
  void claim_part(long long k, int part);
  void build_part(long long k, int part, HostBatch& b) const;
  int parts(long long k) const;
  void release(long long k);

  LoaderOptions opt_;
  DatasetMeta meta_;
  Augmenter aug_;  // this epoch's (made again by start_epoch where [data] progressive changes the crop)
  SampleFormat format_;
  long long batches_per_epoch_ = 0, samples_per_epoch_ = 0;
  int wake_at_ = 1;        // free window slots at which next() wakes the readers
  int part_samples_ = 16;  // samples a reader builds at a time
  int max_files_ = 0;      // files held at once (held_files()); the prefetch window's files always get in
  int epoch_ = 0;
  std::vector<SampleRef> stream_;
  // The distinct files of batch k: batch_files_[batch_files_at_[k - first_] ...].
  std::vector<uint32_t> batch_files_;
  std::vector<size_t> batch_files_at_;
  std::vector<uint32_t> load_order_;  // files in the order of their first use
  size_t next_load_ = 0;
  int resident_ = 0;             // files loading or loaded and still to be used
  std::vector<FileSlot> files_;  // by file number
  std::vector<std::unique_ptr<LoadedFile>> spare_files_;
  // next_build_: the first batch with parts not yet claimed, next_part_ its next part.
  long long first_ = 0, next_build_ = 0, next_take_ = 0, end_ = 0;
  int next_part_ = 0;
  std::vector<ReadySlot> ready_;  // batch k in ready_[k % prefetch]
  std::vector<HostBatch> spare_batches_;
  // Reading ahead into the next epoch: its first files in order of use, those read so far, and
  // the epoch they are for.
  struct AheadFile {
    uint32_t file = 0;
    std::unique_ptr<LoadedFile> data;  // null while being read or if reading failed
  };
  std::vector<uint32_t> ahead_order_;
  size_t next_ahead_ = 0;
  std::vector<AheadFile> ahead_;
  int ahead_epoch_ = -1;
  long long taken_over_ = 0;
  bool stopping_ = false;
  std::mutex mu_;
  std::condition_variable work_cv_, ready_cv_;
  std::vector<std::thread> threads_;
};

}  // namespace convoy
