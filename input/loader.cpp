// Loader threads. Each reader takes the most urgent job there is: first the next part of the
// earliest batch not fully claimed, once that batch is inside the prefetch window and its files
// are verified; else the next file in order of first use, while fewer than `max_files_` are held
// (the files of the batches in the window are always let in, so the loader cannot stall on its own
// limit). Parts and batches may finish out of order and batches are handed out in order; a damaged
// file surfaces as an error at the first batch that needs it, a damaged sample at its batch.
#include "input/loader.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <system_error>

#include "input/augment_spec.h"
#include "shared/atomic_file.h"
#include "shared/counter_rng.h"
#include "shared/error.h"
#include "shared/jpeg_region.h"

namespace convoy {

DecodedFile load_batch_file(const std::string& dir, const DatasetMeta& meta, size_t file) {
  require_one_shape(meta, dir);
  const std::string path = join_path(dir, meta.files[file].name);
  const ImageShape& shape = meta.shape;
  LoadedFile f;
  f.load(path, meta.files[file], shape);
  DecodedFile d;
  const size_t n = f.count(), bytes = shape.bytes();
  d.pixels.resize(n * bytes);
  JpegRegionDecoder dec;
  const int W = int(shape.width), H = int(shape.height), C = int(shape.channels);
  for (size_t i = 0; i < n; ++i) {
    d.labels.push_back(f.label(i)), d.ids.push_back(f.id(i));
    if (!f.jpeg()) {
      std::memcpy(d.pixels.data() + i * bytes, f.pixels(i), bytes);
      continue;
    }
    PixelView v;
    try {
      v = dec.decode(f.jpeg_data(i), f.jpeg_size(i), W, H, C, 1, PixelRect{0, 0, W, H});
    } catch (const Error& e) {
      fail_file(path, "sample " + std::to_string(i) + ": " + e.what());
    }
    for (int y = 0; y < H; ++y)
      std::memcpy(d.pixels.data() + i * bytes + size_t(y) * W * C, v.data + y * v.stride, size_t(W) * C);
  }
  return d;
}

namespace {

// The callers check their own flags; this is for every one of them, before anything is built.
const LoaderOptions& checked(const LoaderOptions& o) {
  if (o.local_batch < 1) fail("loader: batch " + std::to_string(o.local_batch) + " must be positive");
  if (o.share.ranks < 1 || o.share.rank < 0 || o.share.rank >= o.share.ranks)
    fail("loader: rank " + std::to_string(o.share.rank) + " of " + std::to_string(o.share.ranks) + " is not a rank");
  if (const std::string problem = augment_problem(o.augment); !problem.empty()) fail(problem);
  return o;
}

}  // namespace

Loader::Loader(const LoaderOptions& o, const DatasetMeta& meta)
    : opt_(checked(o)), meta_(meta), aug_(meta.shape, o.augment, o.train, meta.mean, meta.std) {
  if (meta_.files.empty()) fail_file(join_path(o.dir, kDatasetJson), "lists no batch files");
  opt_.readers = std::max(1, opt_.readers);
  format_ = aug_.format();
  // The same in every epoch: training gives every rank as many full batches, and evaluation deals
  // files in file order.
  const long long b = opt_.local_batch;
  batches_per_epoch_ = opt_.train ? steps_per_epoch(meta_, opt_.share.ranks, opt_.local_batch) : 0;
  samples_per_epoch_ = opt_.train ? batches_per_epoch_ * b : (long long)rank_stream(meta_, plan(0)).size();
  if (!opt_.train) batches_per_epoch_ = (samples_per_epoch_ + b - 1) / b;
  const size_t out_bytes = opt_.raw() ? aug_.out_bytes() : sizeof(float) * aug_.out_bytes();
  // Parts of at least 16 samples and 1 MiB of output: small enough that a batch of JPEGs spreads
  // over the readers, large enough that tiny samples do not make the readers queue on the lock.
  part_samples_ = int(std::clamp<size_t>((size_t(1) << 20) / std::max<size_t>(1, out_bytes), 16,
                                         size_t(std::max(16, opt_.local_batch))));
  if (opt_.prefetch <= 0) {
    // About 64 MiB of batches: a window that is a few steps of a large net, and tens of steps of
    // a small one, whose steps are short enough for a thread wake-up to count; and enough parts
    // in it for every reader.
    const size_t batch_bytes = size_t(std::max(1, opt_.local_batch)) * out_bytes;
    const int parts_per_batch = (std::max(1, opt_.local_batch) + part_samples_ - 1) / part_samples_;
    const int for_readers = (2 * opt_.readers + parts_per_batch - 1) / parts_per_batch;
    opt_.prefetch = std::max(for_readers,
                             int(std::clamp<size_t>((size_t(64) << 20) / std::max<size_t>(1, batch_bytes), 4, 64)));
  }
  // The consumer wakes the readers once a quarter of the window is free, not after every batch:
  // waking a sleeping thread costs the consumer microseconds, a share of a short step.
  wake_at_ = std::max(1, opt_.prefetch / 4);
  // The shuffle window being built from and the next one being read: while the batches of one
  // window are assembled, the files of the next are read and verified.
  max_files_ = held_files(0);
  ready_.resize(size_t(opt_.prefetch));
}

// Global order's global batches are the same at any ranks: no other ranks' plan to follow.
PlanOptions Loader::plan(int epoch, int plan_ranks) const {
  const bool follow = opt_.train && opt_.share.order == SampleOrder::local;
  return PlanOptions{opt_.share.seed,  epoch,
                     opt_.share.rank,  opt_.share.ranks,
                     opt_.train,       opt_.share.window_files,
                     opt_.local_batch, follow ? plan_ranks : 0,
                     opt_.share.order};
}

// Two shuffle windows: the one batches are built from and the next one being read. An epoch that
// follows another number of ranks' plan builds each batch from the windows of every plan rank
// its slice of the global batch touches.
int Loader::held_files(int plan_ranks) const {
  const int windows = 2 * std::max(1, opt_.share.window_files);
  if (plan_ranks <= 0 || plan_ranks == opt_.share.ranks) return windows;
  const long long global = (long long)opt_.local_batch * opt_.share.ranks, Lq = global / plan_ranks;
  const long long touched = std::min<long long>(plan_ranks, (opt_.local_batch + Lq - 1) / Lq + 1);
  return windows * int(touched);
}

size_t Loader::memory_bound() const {
  uint64_t largest = 0;
  for (const BatchFileEntry& f : meta_.files) largest = std::max(largest, f.bytes);
  // At the largest sample (format_), whichever epoch's crop aug_ has now.
  const size_t sample = format_.bytes();
  const size_t out = size_t(opt_.local_batch) * (opt_.raw() ? sample : sizeof(float) * sample);
  return size_t(max_files_) * size_t(largest) + size_t(opt_.prefetch + 2) * out +
         size_t(opt_.readers) * (stored_bytes() + sizeof(float) * sample);
}

// Where sizes vary, a 2:1 image at the short side (or the long-side cap), a reader's decode of one.
size_t Loader::stored_bytes() const {
  if (!meta_.resize.varied) return meta_.shape.bytes();
  const size_t s = meta_.resize.short_side, longest = meta_.resize.max_side ? meta_.resize.max_side : 2 * s;
  return s * longest * meta_.shape.channels;
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

void Loader::start_epoch(int epoch, long long first, int plan_ranks) {
  stop();
  const PlanOptions p = plan(epoch, plan_ranks);
  if (p.plan_ranks > 0 && ((long long)opt_.local_batch * opt_.share.ranks) % p.plan_ranks != 0)
    fail("loader: a global batch of " + std::to_string((long long)opt_.local_batch * opt_.share.ranks) +
         " does not split over " + std::to_string(p.plan_ranks) + " ranks");
  max_files_ = held_files(p.plan_ranks);
  stream_ = rank_stream(meta_, p);
  // [data] progressive: this epoch's crops are of its own side (the readers are stopped, so none
  // is using the augmenter); sizes of the constructor's, at the largest, still bound the memory.
  if (opt_.train && opt_.augment.progressive.on()) {
    AugmentSpec a = opt_.augment;
    a.crop = train_crop(a, epoch);
    aug_ = Augmenter(meta_.shape, a, true, meta_.mean, meta_.std);
  }
  const long long b = opt_.local_batch;
  end_ = batches_per_epoch_;
  epoch_ = epoch;
  first_ = next_build_ = next_take_ = std::min(first, end_);
  next_part_ = 0;
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
    const PlanOptions q = plan(epoch + 1);
    for (const SampleRef& r : rank_stream(meta_, q)) {
      if (int(ahead_order_.size()) >= opt_.share.window_files) break;
      if (std::find(ahead_order_.begin(), ahead_order_.end(), r.file) == ahead_order_.end())
        ahead_order_.push_back(r.file);
    }
  }
  try {
    for (int t = 0; t < opt_.readers; ++t) threads_.emplace_back([this] { worker(); });
  } catch (const std::system_error& e) {
    const size_t started = threads_.size();
    stop();
    fail("loader: cannot start reader thread " + std::to_string(started + 1) + " of " + std::to_string(opt_.readers) +
         " (" + e.what() + "); ask for fewer readers");
  }
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

int Loader::parts(long long k) const {
  const long long n = std::min<long long>(opt_.local_batch, (long long)stream_.size() - k * opt_.local_batch);
  return int((n + part_samples_ - 1) / part_samples_);
}

// Under the lock: the first part of a batch readies its slot, so the others only write into it.
void Loader::claim_part(long long k, int part) {
  ReadySlot& r = ready_[size_t(k % opt_.prefetch)];
  if (part == 0) {
    r.parts_left = parts(k);
    if (!spare_batches_.empty()) {
      r.batch = std::move(spare_batches_.back());
      spare_batches_.pop_back();
    }
    HostBatch& hb = r.batch;
    const size_t b = size_t(opt_.local_batch), lo = size_t(k) * b, n = std::min(stream_.size(), lo + b) - lo;
    hb.n = int(n);
    hb.height = aug_.out_h, hb.width = aug_.out_w;
    try {
      if (opt_.raw())
        hb.pixels.resize(n * aug_.out_bytes()), hb.flips.resize(n);
      else
        hb.x.resize(n * aug_.out_bytes());
      hb.labels.resize(n);
      hb.keys.resize(n);
    } catch (const std::bad_alloc&) {
      const size_t bytes = n * aug_.out_bytes() * (opt_.raw() ? 1 : sizeof(float));
      r.error = std::make_exception_ptr(Error("the loader cannot allocate a batch of " + std::to_string(n) +
                                              " samples of " + std::to_string(aug_.out_h) + "x" +
                                              std::to_string(aug_.out_w) + " (" + std::to_string(bytes >> 20) +
                                              " MiB); use a smaller --batch or crop"));
    }
  }
  if (part + 1 == parts(k)) {
    ++next_build_;
    next_part_ = 0;
  } else {
    next_part_ = part + 1;
  }
}

// Runs without the lock: the files of batch k stay loaded until its last part is done, and each
// part writes its own samples of the batch.
void Loader::build_part(long long k, int part, HostBatch& hb) const {
  thread_local JpegRegionDecoder decoder;
  thread_local std::vector<uint8_t> scratch;
  const size_t b = size_t(opt_.local_batch), first = size_t(k) * b;
  const size_t lo = first + size_t(part) * part_samples_;
  const size_t hi = std::min({stream_.size(), first + b, lo + size_t(part_samples_)});
  const size_t out_bytes = aug_.out_bytes();
  const int C = int(meta_.shape.channels);
  if (!opt_.raw()) scratch.resize(out_bytes);
  const uint64_t key = augment_epoch_key(opt_.share.seed, epoch_);
  for (size_t i = lo; i < hi; ++i) {
    const size_t j = i - first;
    const SampleRef r = stream_[i];
    const LoadedFile& f = *files_[r.file].data;
    const int64_t id = f.id(r.index);
    const ImageShape shape = f.shape(r.index);
    const int W = int(shape.width), H = int(shape.height);
    const ImageSize image{H, W};
    const SampleCrop c = aug_.choose(key, id, image);
    uint8_t* out = opt_.raw() ? hb.pixels.data() + j * out_bytes : scratch.data();
    if (f.jpeg()) {
      const int s = aug_.dct_scale(c);
      const PixelRect need = aug_.source_rect(c, s, image);
      PixelView v;
      if (need.w > 0) try {
          v = decoder.decode(f.jpeg_data(r.index), f.jpeg_size(r.index), W, H, C, s, need);
        } catch (const Error& e) {
          fail_file(join_path(opt_.dir, meta_.files[r.file].name),
                    "sample " + std::to_string(r.index) + ": " + e.what());
        }
      aug_.render(v, c, s, image, out);
    } else {
      aug_.render(PixelView{f.pixels(r.index), size_t(W) * C, C, PixelRect{0, 0, W, H}}, c, 1, image, out);
    }
    if (opt_.output == SampleOutput::mirrored && c.flip)
      aug_.mirror(out), hb.flips[j] = 0;
    else if (opt_.raw())
      hb.flips[j] = c.flip;
    else
      aug_.normalize(out, c.flip, hb.x.data() + j * out_bytes);
    const int32_t label = f.label(r.index);
    if (label < 0 || size_t(label) >= meta_.classes.size())
      fail_file(join_path(opt_.dir, meta_.files[r.file].name), "sample " + std::to_string(r.index) + " has label " +
                                                                   std::to_string(label) + " outside the " +
                                                                   std::to_string(meta_.classes.size()) + " classes");
    hb.labels[j] = label;
    hb.keys[j] = uint64_t(id);
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

// A reader's loop: build a part of the next batch when its files are in; otherwise read the next
// file of this epoch when the window has room; otherwise read ahead into the next epoch; otherwise wait.
void Loader::worker() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!stopping_) {
    if (build_next_part(lk) || load_next_file(lk) || read_ahead(lk)) continue;
    if (next_build_ >= end_ && next_ahead_ >= ahead_order_.size()) return;
    if (next_build_ >= end_ && resident_ + int(ahead_.size()) >= max_files_) return;  // no room left to read ahead
    work_cv_.wait(lk);
  }
}

bool Loader::build_next_part(std::unique_lock<std::mutex>& lk) {
  if (!(next_build_ < end_ && next_build_ < next_take_ + opt_.prefetch && files_ready(next_build_))) return false;
  const long long k = next_build_;
  const int part = next_part_;
  claim_part(k, part);
  ReadySlot& r = ready_[size_t(k % opt_.prefetch)];
  // A batch whose buffers could not be had (claim_part's error) has nothing to build into.
  const bool unsized = r.error != nullptr;
  std::exception_ptr err;
  lk.unlock();
  try {
    if (!unsized) build_part(k, part, r.batch);
  } catch (...) {
    err = std::current_exception();
  }
  lk.lock();
  if (err && !r.error) r.error = err;
  if (--r.parts_left == 0) {
    release(k);
    r.done = true;
    ready_cv_.notify_all();
    work_cv_.notify_all();  // files released: room for the next ones
  }
  return true;
}

std::unique_ptr<LoadedFile> Loader::spare_file() {
  if (spare_files_.empty()) return std::make_unique<LoadedFile>();
  std::unique_ptr<LoadedFile> data = std::move(spare_files_.back());
  spare_files_.pop_back();
  return data;
}

bool Loader::load_next_file(std::unique_lock<std::mutex>& lk) {
  if (next_load_ >= load_order_.size()) return false;
  const uint32_t f = load_order_[next_load_];
  FileSlot& s = files_[f];
  if (s.state != FileState::waiting || s.uses_left == 0) {
    ++next_load_;  // taken over from the last epoch's reading ahead (and perhaps used up already)
    return true;
  }
  if (!(s.first_batch < next_take_ + opt_.prefetch || resident_ < max_files_)) return false;
  ++next_load_;
  ++resident_;
  s.state = FileState::loading;
  std::unique_ptr<LoadedFile> data = spare_file();
  std::exception_ptr err;
  lk.unlock();
  const std::string path = join_path(opt_.dir, meta_.files[f].name);
  try {
    data->load(path, meta_.files[f], meta_.shape);
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
  return true;
}

// This epoch's files are all being read: read the next epoch's first window while there is room
// (counted with this epoch's files, so memory stays within two windows).
bool Loader::read_ahead(std::unique_lock<std::mutex>& lk) {
  if (!(next_load_ >= load_order_.size() && next_ahead_ < ahead_order_.size() &&
        resident_ + int(ahead_.size()) < max_files_))
    return false;
  const size_t slot = ahead_.size();
  ahead_.push_back({ahead_order_[next_ahead_++], nullptr});
  std::unique_ptr<LoadedFile> data = spare_file();
  const uint32_t f = ahead_[slot].file;
  lk.unlock();
  bool ok = true;
  try {
    data->load(join_path(opt_.dir, meta_.files[f].name), meta_.files[f], meta_.shape);
  } catch (...) {
    ok = false;
  }
  lk.lock();
  if (ok)
    ahead_[slot].data = std::move(data);
  else
    spare_files_.push_back(std::move(data));
  return true;
}

bool Loader::next(HostBatch& out) {
  Take t;
  while ((t = next_for(out, std::chrono::hours(1))) == Take::waiting) continue;
  return t == Take::batch;
}

Loader::Take Loader::next_for(HostBatch& out, std::chrono::milliseconds patience) {
  std::unique_lock<std::mutex> lk(mu_);
  if (next_take_ >= end_) {
    // An evaluation pass runs once per training epoch: its buffers would sit idle in between.
    if (!opt_.train) {
      spare_files_.clear();
      spare_batches_.clear();
    }
    return Take::end;
  }
  ReadySlot& r = ready_[size_t(next_take_ % opt_.prefetch)];
  std::exception_ptr err;
  if (!r.done) work_cv_.notify_all();  // the readers may be waiting for the window to empty further
  if (!ready_cv_.wait_for(lk, patience, [&] { return r.done || (err = file_error(next_take_)); })) return Take::waiting;
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
  return Take::batch;
}

}  // namespace convoy
