// Loader threads. Workers claim batch numbers in order, but only within `prefetch` batches of
// the one the trainer takes next, which bounds memory; batches may finish out of order and are
// handed out in order.
#include "train/loader.h"

#include <turbojpeg.h>

#include <algorithm>
#include <cstring>

#include "shared/atomic_file.h"
#include "shared/error.h"

namespace convoy {
namespace {

struct TjHandle {
  tjhandle h = tjInitDecompress();
  ~TjHandle() {
    if (h) tjDestroy(h);
  }
};

}  // namespace

DecodedFile load_batch_file(const std::string& path, const ImageShape& shape) {
  Batch b = read_batch_file(path);
  if (!(b.shape == shape))
    fail_file(path, "image shape " + std::to_string(b.shape.height) + "x" + std::to_string(b.shape.width) +
                        "x" + std::to_string(b.shape.channels) + " differs from dataset.json");
  DecodedFile d;
  d.labels = std::move(b.labels);
  d.ids = std::move(b.ids);
  const size_t n = d.labels.size();
  if (b.encoding == Encoding::raw) {
    d.pixels = std::move(b.images);
    return d;
  }
  thread_local TjHandle tj;
  if (!tj.h) fail_file(path, "cannot start the JPEG decoder");
  d.pixels.resize(n * shape.bytes());
  const int pf = shape.channels == 1 ? TJPF_GRAY : TJPF_RGB;
  if (shape.channels != 1 && shape.channels != 3)
    fail_file(path, "JPEG samples need 1 or 3 channels, not " + std::to_string(shape.channels));
  for (size_t i = 0; i < n; ++i) {
    const uint64_t a = b.offsets[i], e = b.offsets[i + 1];
    if (e < a || e > b.images.size()) fail_file(path, "sample " + std::to_string(i) + ": bad JPEG offsets");
    int w = 0, h = 0, sub = 0, cs = 0;
    if (tjDecompressHeader3(tj.h, b.images.data() + a, (unsigned long)(e - a), &w, &h, &sub, &cs) != 0)
      fail_file(path, "sample " + std::to_string(i) + ": " + tjGetErrorStr2(tj.h));
    if (w != int(shape.width) || h != int(shape.height))
      fail_file(path, "sample " + std::to_string(i) + ": JPEG is " + std::to_string(w) + "x" +
                          std::to_string(h) + ", dataset.json says " + std::to_string(shape.width) + "x" +
                          std::to_string(shape.height));
    if (tjDecompress2(tj.h, b.images.data() + a, (unsigned long)(e - a), d.pixels.data() + i * shape.bytes(),
                      w, 0, h, pf, TJFLAG_ACCURATEDCT) != 0)
      fail_file(path, "sample " + std::to_string(i) + ": " + tjGetErrorStr2(tj.h));
  }
  return d;
}

Loader::Loader(const LoaderOptions& o, const DatasetMeta& meta)
    : opt_(o), meta_(meta),
      aug_(meta.shape, o.augment.crop, o.train ? o.augment.pad : 0, o.train && o.augment.flip, meta.mean, meta.std) {
  if (meta_.files.empty()) fail_file(join_path(o.dir, kDatasetJson), "lists no batch files");
  opt_.readers = std::max(1, opt_.readers);
  opt_.prefetch = std::max(1, opt_.prefetch);
}

Loader::~Loader() { stop(); }

void Loader::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void Loader::start_epoch(int epoch, long long first) {
  stop();
  PlanOptions p{opt_.seed, epoch, opt_.rank, opt_.ranks, opt_.train, opt_.window_files};
  stream_ = rank_stream(meta_, p);
  const long long b = opt_.local_batch;
  end_ = opt_.train ? steps_per_epoch(meta_, p, opt_.local_batch) : (long long)(stream_.size() + b - 1) / b;
  epoch_ = epoch;
  next_build_ = next_take_ = std::min(first, end_);
  ready_.clear();
  cache_.clear();
  uses_left_.clear();
  error_ = nullptr;
  stopping_ = false;
  // How many of the remaining batches use each file, so a file is dropped after its last one.
  for (long long k = next_build_; k < end_; ++k) {
    const size_t lo = size_t(k * b), hi = std::min(stream_.size(), size_t((k + 1) * b));
    uint32_t last = UINT32_MAX;
    for (size_t i = lo; i < hi; ++i)
      if (stream_[i].file != last) {
        // Windows mix files, so a file can recur within a batch; count each batch once.
        bool seen = false;
        for (size_t j = lo; j < i && !seen; ++j) seen = stream_[j].file == stream_[i].file;
        if (!seen) uses_left_[stream_[i].file]++;
        last = stream_[i].file;
      }
  }
  for (int t = 0; t < opt_.readers; ++t) threads_.emplace_back([this] { worker(); });
}

std::shared_ptr<const DecodedFile> Loader::acquire(uint32_t file) {
  std::shared_future<std::shared_ptr<const DecodedFile>> fut;
  std::promise<std::shared_ptr<const DecodedFile>> mine;
  bool load = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = cache_.find(file);
    if (it == cache_.end()) {
      fut = mine.get_future().share();
      cache_[file] = fut;
      load = true;
    } else {
      fut = it->second;
    }
  }
  if (load) {
    try {
      const std::string path = join_path(opt_.dir, meta_.files[file].name);
      auto d = std::make_shared<DecodedFile>(load_batch_file(path, meta_.shape));
      if (d->labels.size() != meta_.files[file].count)
        fail_file(path, "holds " + std::to_string(d->labels.size()) + " samples, dataset.json says " +
                            std::to_string(meta_.files[file].count));
      mine.set_value(std::move(d));
    } catch (...) {
      mine.set_exception(std::current_exception());
    }
  }
  return fut.get();
}

void Loader::build(long long k, HostBatch& hb) {
  const size_t b = size_t(opt_.local_batch);
  const size_t lo = size_t(k) * b, hi = std::min(stream_.size(), lo + b);
  const int n = int(hi - lo);
  const size_t per = size_t(meta_.shape.channels) * aug_.out_h * aug_.out_w;
  const size_t stored = meta_.shape.bytes();
  hb.n = n;
  if (opt_.raw) {
    hb.pixels.resize(size_t(n) * stored);
    hb.crops.resize(3 * size_t(n));
  } else {
    hb.x.resize(size_t(n) * per);
  }
  hb.labels.resize(n);
  hb.keys.resize(n);
  const uint64_t key = opt_.seed * 0xD1B54A32D192ED03ull + uint64_t(epoch_) * 0x9E3779B97F4A7C15ull + 7;
  std::map<uint32_t, std::shared_ptr<const DecodedFile>> files;
  for (size_t i = lo; i < hi; ++i) {
    const SampleRef r = stream_[i];
    auto& f = files[r.file];
    if (!f) f = acquire(r.file);
    const int64_t id = f->ids[r.index];
    const CropFlip cf = aug_.choose(opt_.train, key, id);
    const uint8_t* px = f->pixels.data() + size_t(r.index) * stored;
    if (opt_.raw) {
      std::copy(px, px + stored, hb.pixels.data() + (i - lo) * stored);
      int32_t* c = hb.crops.data() + 3 * (i - lo);
      c[0] = cf.top, c[1] = cf.left, c[2] = cf.flip;
    } else {
      aug_.apply(px, cf, hb.x.data() + (i - lo) * per);
    }
    const int32_t label = f->labels[r.index];
    if (label < 0 || size_t(label) >= meta_.classes.size())
      fail_file(join_path(opt_.dir, meta_.files[r.file].name),
                "sample " + std::to_string(r.index) + " has label " + std::to_string(label) + " outside the " +
                    std::to_string(meta_.classes.size()) + " classes");
    hb.labels[i - lo] = label;
    hb.keys[i - lo] = uint64_t(id);
  }
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& [file, ptr] : files)
    if (--uses_left_[file] <= 0) cache_.erase(file);
}

void Loader::worker() {
  for (;;) {
    long long k;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stopping_ || next_build_ >= end_ || next_build_ < next_take_ + opt_.prefetch; });
      if (stopping_ || next_build_ >= end_) return;
      k = next_build_++;
    }
    HostBatch hb;
    try {
      build(k, hb);
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu_);
      if (!error_) error_ = std::current_exception();
      stopping_ = true;
      cv_.notify_all();
      return;
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      ready_[k] = std::move(hb);
    }
    cv_.notify_all();
  }
}

bool Loader::next(HostBatch& out) {
  std::unique_lock<std::mutex> lk(mu_);
  if (next_take_ >= end_) return false;
  cv_.wait(lk, [&] { return error_ || ready_.count(next_take_); });
  if (error_) std::rethrow_exception(error_);
  auto it = ready_.find(next_take_);
  out = std::move(it->second);
  ready_.erase(it);
  ++next_take_;
  lk.unlock();
  cv_.notify_all();
  return true;
}

}  // namespace convoy
