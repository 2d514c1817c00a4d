// Loader threads. Each reader takes the most urgent job there is: first the next batch in order,
// once it is inside the prefetch window and its files are verified; else the next file in order
// of first use, while fewer than `max_files_` are held (the files of the batches in the window are
// always let in, so the loader cannot stall on its own limit). Batches may finish out of order and
// are handed out in order; a damaged file surfaces as an error at the first batch that needs it.
#include "train/loader.h"

#include <algorithm>
#include <cstring>

#include "shared/atomic_file.h"
#include "shared/error.h"

namespace convoy {

DecodedFile load_batch_file(const std::string& path, const ImageShape& shape) {
  LoadedFile f;
  f.load(path, shape);
  DecodedFile d;
  const size_t n = f.count();
  d.pixels.assign(f.pixels(0), f.pixels(0) + n * shape.bytes());
  for (size_t i = 0; i < n; ++i) d.labels.push_back(f.label(i)), d.ids.push_back(f.id(i));
  return d;
}

Loader::Loader(const LoaderOptions& o, const DatasetMeta& meta)
    : opt_(o), meta_(meta),
      aug_(meta.shape, o.augment.crop, o.train ? o.augment.pad : 0, o.train && o.augment.flip, meta.mean, meta.std) {
  if (meta_.files.empty()) fail_file(join_path(o.dir, kDatasetJson), "lists no batch files");
  opt_.readers = std::max(1, opt_.readers);
  if (opt_.prefetch <= 0) {
    // About 64 MiB of batches: a window that is a few steps of a large net, and tens of steps of
    // a small one, whose steps are short enough for a thread wake-up to count.
    const size_t batch_bytes = size_t(std::max(1, opt_.local_batch)) *
                               (opt_.raw ? meta_.shape.bytes()
                                         : sizeof(float) * meta_.shape.channels * aug_.out_h * aug_.out_w);
    opt_.prefetch = int(std::clamp<size_t>((size_t(64) << 20) / std::max<size_t>(1, batch_bytes), 4, 64));
  }
  // The consumer wakes the readers once a quarter of the window is free, not after every batch:
  // waking a sleeping thread costs the consumer microseconds, a share of a short step.
  wake_at_ = std::max(1, opt_.prefetch / 4);
  // The shuffle window being built from and the next one being read: while the batches of one
  // window are assembled, the files of the next are read and verified.
  max_files_ = 2 * std::max(1, opt_.window_files);
  ready_.resize(size_t(opt_.prefetch));
}

Loader::~Loader() { stop(); }

void Loader::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  ready_cv_.notify_all();
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
  first_ = next_build_ = next_take_ = std::min(first, end_);
  stopping_ = false;

  // Buffers of the last epoch are kept for this one.
  if (files_.size() != meta_.files.size()) files_.resize(meta_.files.size());
  for (FileSlot& f : files_) {
    if (f.data) spare_files_.push_back(std::move(f.data));
    f = FileSlot{};
  }
  // Files the readers already read for this epoch (see worker()); a failed one is read again
  // below, so that its error surfaces at the batch that needs it.
  std::vector<AheadFile> ahead = std::move(ahead_);
  ahead_.clear();
  if (ahead_epoch_ != epoch) {
    for (AheadFile& a : ahead)
      if (a.data) spare_files_.push_back(std::move(a.data));
    ahead.clear();
  }
  for (ReadySlot& r : ready_) {
    if (!r.batch.labels.empty()) spare_batches_.push_back(std::move(r.batch));
    r = ReadySlot{};
  }

  // Each batch's distinct files (windows mix files, so a file recurs within a batch), how many
  // batches use each file, and the order in which files are first needed.
  batch_files_.clear();
  batch_files_at_.assign(1, 0);
  load_order_.clear();
  next_load_ = 0;
  resident_ = 0;
  std::vector<uint32_t> distinct;
  for (long long k = first_; k < end_; ++k) {
    const size_t lo = size_t(k * b), hi = std::min(stream_.size(), size_t((k + 1) * b));
    distinct.clear();
    for (size_t i = lo; i < hi; ++i) {
      const uint32_t f = stream_[i].file;
      if (std::find(distinct.begin(), distinct.end(), f) != distinct.end()) continue;
      distinct.push_back(f);
      FileSlot& s = files_[f];
      if (s.uses_left++ == 0) {
        s.first_batch = k;
        load_order_.push_back(f);
      }
    }
    batch_files_.insert(batch_files_.end(), distinct.begin(), distinct.end());
    batch_files_at_.push_back(batch_files_.size());
  }
  for (AheadFile& a : ahead) {
    FileSlot& s = files_[a.file];
    if (a.data && s.uses_left > 0 && s.state == FileState::waiting) {
      s.data = std::move(a.data);
      s.state = FileState::ready;
      ++resident_;
      ++taken_over_;
    }
    if (a.data) spare_files_.push_back(std::move(a.data));
  }

  // The next epoch's first shuffle window, read once this epoch's files are.
  ahead_order_.clear();
  next_ahead_ = 0;
  ahead_epoch_ = epoch + 1;
  if (opt_.train) {
    PlanOptions q = p;
    q.epoch = epoch + 1;
    for (const SampleRef& r : rank_stream(meta_, q)) {
      if (int(ahead_order_.size()) >= opt_.window_files) break;
      if (std::find(ahead_order_.begin(), ahead_order_.end(), r.file) == ahead_order_.end())
        ahead_order_.push_back(r.file);
    }
  }
  for (int t = 0; t < opt_.readers; ++t) threads_.emplace_back([this] { worker(); });
}

int Loader::files_read_ahead() {
  std::lock_guard<std::mutex> lk(mu_);
  return int(std::count_if(ahead_.begin(), ahead_.end(), [](const AheadFile& a) { return a.data != nullptr; }));
}

bool Loader::files_ready(long long k) const {
  const size_t j = size_t(k - first_);
  for (size_t i = batch_files_at_[j]; i < batch_files_at_[j + 1]; ++i)
    if (files_[batch_files_[i]].state != FileState::ready) return false;
  return true;
}

std::exception_ptr Loader::file_error(long long k) const {
  const size_t j = size_t(k - first_);
  for (size_t i = batch_files_at_[j]; i < batch_files_at_[j + 1]; ++i)
    if (files_[batch_files_[i]].state == FileState::failed) return files_[batch_files_[i]].error;
  return nullptr;
}

// Runs without the lock: the files of batch k stay loaded until release(k), and nothing else
// writes to their slots meanwhile.
void Loader::build(long long k, HostBatch& hb) const {
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
  for (size_t i = lo; i < hi; ++i) {
    const SampleRef r = stream_[i];
    const LoadedFile& f = *files_[r.file].data;
    const int64_t id = f.id(r.index);
    const CropFlip cf = aug_.choose(opt_.train, key, id);
    const uint8_t* px = f.pixels(r.index);
    if (opt_.raw) {
      std::memcpy(hb.pixels.data() + (i - lo) * stored, px, stored);
      int32_t* c = hb.crops.data() + 3 * (i - lo);
      c[0] = cf.top, c[1] = cf.left, c[2] = cf.flip;
    } else {
      aug_.apply(px, cf, hb.x.data() + (i - lo) * per);
    }
    const int32_t label = f.label(r.index);
    if (label < 0 || size_t(label) >= meta_.classes.size())
      fail_file(join_path(opt_.dir, meta_.files[r.file].name),
                "sample " + std::to_string(r.index) + " has label " + std::to_string(label) + " outside the " +
                    std::to_string(meta_.classes.size()) + " classes");
    hb.labels[i - lo] = label;
    hb.keys[i - lo] = uint64_t(id);
  }
}

void Loader::release(long long k) {
  const size_t j = size_t(k - first_);
  for (size_t i = batch_files_at_[j]; i < batch_files_at_[j + 1]; ++i) {
    FileSlot& s = files_[batch_files_[i]];
    if (--s.uses_left > 0) continue;
    spare_files_.push_back(std::move(s.data));
    s.state = FileState::waiting;
    --resident_;
  }
}

void Loader::worker() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!stopping_) {
    if (next_build_ < end_ && next_build_ < next_take_ + opt_.prefetch && files_ready(next_build_)) {
      const long long k = next_build_++;
      HostBatch hb;
      if (!spare_batches_.empty()) {
        hb = std::move(spare_batches_.back());
        spare_batches_.pop_back();
      }
      std::exception_ptr err;
      lk.unlock();
      try {
        build(k, hb);
      } catch (...) {
        err = std::current_exception();
      }
      lk.lock();
      release(k);
      ReadySlot& r = ready_[size_t(k % opt_.prefetch)];
      r.done = true;
      r.batch = std::move(hb);
      r.error = err;
      ready_cv_.notify_all();
      work_cv_.notify_all();  // files released: room for the next ones
      continue;
    }
    if (next_load_ < load_order_.size() && files_[load_order_[next_load_]].state != FileState::waiting) {
      ++next_load_;  // taken over from the last epoch's reading ahead
      continue;
    }
    if (next_load_ < load_order_.size()) {
      const uint32_t f = load_order_[next_load_];
      FileSlot& s = files_[f];
      if (s.first_batch < next_take_ + opt_.prefetch || resident_ < max_files_) {
        ++next_load_;
        ++resident_;
        s.state = FileState::loading;
        std::unique_ptr<LoadedFile> data;
        if (!spare_files_.empty()) {
          data = std::move(spare_files_.back());
          spare_files_.pop_back();
        } else {
          data = std::make_unique<LoadedFile>();
        }
        std::exception_ptr err;
        lk.unlock();
        const std::string path = join_path(opt_.dir, meta_.files[f].name);
        try {
          data->load(path, meta_.shape);
          if (data->count() != meta_.files[f].count)
            fail_file(path, "holds " + std::to_string(data->count()) + " samples, dataset.json says " +
                                std::to_string(meta_.files[f].count));
        } catch (...) {
          err = std::current_exception();
        }
        lk.lock();
        if (err) {
          s.state = FileState::failed;
          s.error = err;
          spare_files_.push_back(std::move(data));
          ready_cv_.notify_all();
        } else {
          s.state = FileState::ready;
          s.data = std::move(data);
          work_cv_.notify_all();
        }
        continue;
      }
    }
    // This epoch's files are all being read: read the next epoch's first window while there is room
    // (counted with this epoch's files, so memory stays within two windows).
    if (next_load_ >= load_order_.size() && next_ahead_ < ahead_order_.size() &&
        resident_ + int(ahead_.size()) < max_files_) {
      const size_t slot = ahead_.size();
      ahead_.push_back({ahead_order_[next_ahead_++], nullptr});
      std::unique_ptr<LoadedFile> data;
      if (!spare_files_.empty()) {
        data = std::move(spare_files_.back());
        spare_files_.pop_back();
      } else {
        data = std::make_unique<LoadedFile>();
      }
      const uint32_t f = ahead_[slot].file;
      lk.unlock();
      bool ok = true;
      try {
        data->load(join_path(opt_.dir, meta_.files[f].name), meta_.shape);
        ok = data->count() == meta_.files[f].count;
      } catch (...) {
        ok = false;
      }
      lk.lock();
      if (ok)
        ahead_[slot].data = std::move(data);
      else
        spare_files_.push_back(std::move(data));
      continue;
    }
    if (next_build_ >= end_ && next_ahead_ >= ahead_order_.size()) return;
    if (next_build_ >= end_ && resident_ + int(ahead_.size()) >= max_files_) return;  // no room left to read ahead
    work_cv_.wait(lk);
  }
}

bool Loader::next(HostBatch& out) {
  std::unique_lock<std::mutex> lk(mu_);
  if (next_take_ >= end_) {
    // An evaluation pass runs once per training epoch: its buffers would sit idle in between.
    if (!opt_.train) {
      spare_files_.clear();
      spare_batches_.clear();
    }
    return false;
  }
  ReadySlot& r = ready_[size_t(next_take_ % opt_.prefetch)];
  std::exception_ptr err;
  if (!r.done) work_cv_.notify_all();  // the readers may be waiting for the window to empty further
  ready_cv_.wait(lk, [&] { return r.done || (err = file_error(next_take_)); });
  if (!r.done) std::rethrow_exception(err);
  if (r.error) std::rethrow_exception(r.error);
  std::swap(out, r.batch);
  // The buffers the caller handed back are filled again by a later batch.
  if (!r.batch.labels.empty()) spare_batches_.push_back(std::move(r.batch));
  r = ReadySlot{};
  ++next_take_;
  const bool wake = next_take_ + opt_.prefetch >= next_build_ + wake_at_;  // wake_at_ slots free
  lk.unlock();
  if (wake) work_cv_.notify_all();
  return true;
}

}  // namespace convoy
