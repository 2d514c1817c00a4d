// The streaming loader: reader threads assemble batches ahead of the trainer into a bounded
// window of `prefetch` batches. A batch file is read (CRC-checked, JPEG decoded) by the first
// reader that needs it and dropped once the last batch using it is built. Batch k is always
// built from the same samples with the same augmentation, whichever thread builds it.
#pragma once
#include <condition_variable>
#include <exception>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "shared/dataset_meta.h"
#include "train/augment.h"
#include "train/epoch_plan.h"
#include "train/net_config.h"

namespace convoy {

struct HostBatch {
  int n = 0;
  std::vector<float> x;  // [n, C, H, W], normalised (CPU backend)
  // Raw batches (the CUDA backend augments on the GPU): the stored uint8 HWC samples and each
  // one's crop and flip as int32 triples (top, left, flip); x stays empty.
  std::vector<uint8_t> pixels;
  std::vector<int32_t> crops;
  std::vector<int32_t> labels;
  std::vector<uint64_t> keys;  // per-sample keys (dataset ids) for dropout masks
};

struct LoaderOptions {
  std::string dir;
  int local_batch = 128;
  int readers = 2, prefetch = 4;
  bool train = true;           // shuffle and augment; else file order, centre crop, partial last batch
  bool raw = false;            // leave crop/flip/normalise to the consumer (HostBatch::pixels)
  int window_files = 4;
  uint64_t seed = 0;
  int rank = 0, ranks = 1;
  AugmentSpec augment;
};

// Raw HWC pixels of every sample in one batch file.
struct DecodedFile {
  std::vector<uint8_t> pixels;
  std::vector<int32_t> labels;
  std::vector<int64_t> ids;
};
DecodedFile load_batch_file(const std::string& path, const ImageShape& shape);

class Loader {
 public:
  Loader(const LoaderOptions& o, const DatasetMeta& meta);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Starts producing the batches of `epoch` from batch `first` (for resume); in training, `count`
  // batches (steps_per_epoch); in evaluation every sample.
  void start_epoch(int epoch, long long first = 0);
  long long batches_this_epoch() const { return end_; }
  // The next batch in order; false after the last one of the epoch.
  bool next(HostBatch& out);
  int out_channels() const { return int(meta_.shape.channels); }
  int out_height() const { return aug_.out_h; }
  int out_width() const { return aug_.out_w; }
  const DatasetMeta& meta() const { return meta_; }
  const Augmenter& augmenter() const { return aug_; }

 private:
  void stop();
  void worker();
  std::shared_ptr<const DecodedFile> acquire(uint32_t file);
  void build(long long k, HostBatch& b);

  LoaderOptions opt_;
  DatasetMeta meta_;
  Augmenter aug_;
  int epoch_ = 0;
  std::vector<SampleRef> stream_;
  long long next_build_ = 0, next_take_ = 0, end_ = 0;
  std::map<long long, HostBatch> ready_;
  std::map<uint32_t, std::shared_future<std::shared_ptr<const DecodedFile>>> cache_;
  std::map<uint32_t, long long> uses_left_;
  std::exception_ptr error_;
  bool stopping_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::thread> threads_;
};

}  // namespace convoy
