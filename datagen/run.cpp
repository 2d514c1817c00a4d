// The run. Every rank computes the same plan from the broadcast index; batch file b is made by
// rank b mod N alone, its samples decoded in parallel into their slots and compacted in slot
// order, so its bytes depend only on the inputs, the options and the seed.
#include "datagen/run.h"

#include <omp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <opencv2/core.hpp>
#include <thread>

#include "datagen/batch_writer.h"
#include "datagen/gpu_lanes.h"
#include "datagen/gpu_resize.h"
#include "datagen/index.h"
#include "datagen/plan.h"
#include "datagen/png_codec.h"
#include "datagen/progress.h"
#include "datagen/sample_source.h"
#include "datagen/stats.h"
#include "datagen/work_queue.h"
#include "shared/atomic_file.h"
#include "shared/crc32c.h"
#include "shared/dataset_meta.h"
#include "shared/error.h"
#include "shared/log.h"
#include "shared/timer.h"

namespace convoy::datagen {
namespace {

using nlohmann::json;

// Seconds spent per phase, summed over threads (and later over ranks). stats: adding samples to
// the dataset statistics (JPEG samples decoded again for it); assemble: putting a batch file
// together from its slots; write: the writer threads. With --gpu-resize, resize is the host's
// copying of finished samples into their slots, and the GPU parts are apart: gpu_stage (host:
// into pinned memory; decoding straight into it is counted as decode), gpu_upload, gpu_kernel,
// gpu_download (device time from CUDA events) and gpu_wait (host: blocked on the GPU).
// gpu_images and cpu_images count the samples resized on each.
struct Phases {
  double read = 0, decode = 0, resize = 0, encode = 0, stats = 0, assemble = 0, write = 0, wait = 0;
  double gpu_stage = 0, gpu_upload = 0, gpu_kernel = 0, gpu_download = 0, gpu_wait = 0;
  double gpu_images = 0, cpu_images = 0;
  Phases& operator+=(const Phases& o) {
    read += o.read, decode += o.decode, resize += o.resize, encode += o.encode, write += o.write, wait += o.wait;
    stats += o.stats, assemble += o.assemble;
    gpu_stage += o.gpu_stage, gpu_upload += o.gpu_upload, gpu_kernel += o.gpu_kernel;
    gpu_download += o.gpu_download, gpu_wait += o.gpu_wait;
    gpu_images += o.gpu_images, cpu_images += o.cpu_images;
    return *this;
  }
  json to_json(bool gpu) const {
    json j = {{"read", read},   {"decode", decode},     {"resize", resize}, {"encode", encode},
              {"stats", stats}, {"assemble", assemble}, {"write", write},   {"wait", wait}};
    if (gpu) {
      j["gpu_stage"] = gpu_stage, j["gpu_upload"] = gpu_upload, j["gpu_kernel"] = gpu_kernel;
      j["gpu_download"] = gpu_download, j["gpu_wait"] = gpu_wait;
      j["gpu_images"] = gpu_images, j["cpu_images"] = cpu_images;
    }
    return j;
  }
  static Phases from_json(const json& p) {
    Phases t;
    t.read = p["read"], t.decode = p["decode"], t.resize = p["resize"], t.encode = p["encode"];
    t.stats = p.value("stats", 0.0), t.assemble = p.value("assemble", 0.0), t.write = p["write"], t.wait = p["wait"];
    t.gpu_stage = p.value("gpu_stage", 0.0), t.gpu_upload = p.value("gpu_upload", 0.0);
    t.gpu_kernel = p.value("gpu_kernel", 0.0), t.gpu_download = p.value("gpu_download", 0.0);
    t.gpu_wait = p.value("gpu_wait", 0.0);
    t.gpu_images = p.value("gpu_images", 0.0), t.cpu_images = p.value("cpu_images", 0.0);
    return t;
  }
  // Host seconds the decoding threads spent working (not waiting for work).
  double busy() const { return read + decode + resize + encode + stats + assemble + gpu_stage + gpu_wait; }
};

void bcast_string(std::string& s, int root) {
  uint64_t n = s.size();
  CONVOY_MPI_CHECK(MPI_Bcast(&n, 1, MPI_UINT64_T, root, MPI_COMM_WORLD));
  s.resize(n);
  constexpr uint64_t chunk = 1 << 30;
  for (uint64_t at = 0; at < n; at += chunk)
    CONVOY_MPI_CHECK(MPI_Bcast(s.data() + at, int(std::min(chunk, n - at)), MPI_CHAR, root, MPI_COMM_WORLD));
}

// Every rank's string, on rank 0 (in rank order).
std::vector<std::string> gather_strings(const std::string& mine, const MpiContext& mpi) {
  if (mpi.size() == 1) return {mine};
  int len = int(mine.size());
  std::vector<int> lens(size_t(mpi.size())), displs(size_t(mpi.size()));
  CONVOY_MPI_CHECK(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD));
  std::string all;
  if (mpi.rank() == 0) {
    int at = 0;
    for (size_t r = 0; r < lens.size(); ++r) displs[r] = at, at += lens[r];
    all.resize(size_t(at));
  }
  CONVOY_MPI_CHECK(MPI_Gatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0,
                               MPI_COMM_WORLD));
  std::vector<std::string> out;
  if (mpi.rank() == 0)
    for (size_t r = 0; r < lens.size(); ++r) out.push_back(all.substr(size_t(displs[r]), size_t(lens[r])));
  return out;
}

json made_by(const RunOptions& opt) {
  json o = {{"size", opt.size},
            {"channels", opt.channels},
            {"resize", resize_policy_name(opt.resize)},
            {"encoding", encoding_name(opt.encoding)},
            {"per_file", opt.per_file},
            {"seed", opt.seed},
            {"classes", opt.classes_file},
            {"labels", opt.labels_file},
            {"max_pixels", opt.limits.max_pixels},
            {"max_aspect", opt.limits.max_aspect}};
  if (opt.encoding == Encoding::jpeg) o["quality"] = opt.quality;
  return {{"tool", "datagen"}, {"version", "0.1.0"}, {"inputs", opt.inputs}, {"options", o}};
}

// What the inputs looked like when they were scanned: size and modification time of each input
// file, and the contents' checksum of the class and label files. Null when a folder is among the
// inputs, whose contents no single time stamp covers (folders are always scanned again).
json input_stamps(const RunOptions& opt) {
  json stamps = json::array();
  for (const auto& in : opt.inputs) {
    struct stat st {};
    if (::stat(in.c_str(), &st) != 0 || S_ISDIR(st.st_mode)) return nullptr;
    stamps.push_back({in, uint64_t(st.st_size), int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec});
  }
  for (const auto* f : {&opt.classes_file, &opt.labels_file})
    if (!f->empty()) {
      const std::string text = read_whole_file(*f);
      stamps.push_back({*f, crc32c(text.data(), text.size())});
    }
  return stamps;
}

json read_run_file(const std::string& path) {
  try {
    return json::parse(read_whole_file(path));
  } catch (const json::exception&) {
    fail_file(path, "is damaged; remove the output folder's contents to start afresh");
  }
}

// The index saved by an earlier run into this folder, when its options and inputs are unchanged
// (a rerun after a crash need not scan a large archive again); "" otherwise.
std::string saved_index(const RunOptions& opt, const json& stamps) {
  const std::string run_path = join_path(opt.output, kRunFile), index_path = join_path(opt.output, kIndexFile);
  if (stamps.is_null() || !file_exists(run_path) || !file_exists(index_path)) return "";
  const json old = read_run_file(run_path);
  if (old.value("made_by", json()) != made_by(opt) || old.value("stamps", json()) != stamps) return "";
  std::string text = read_whole_file(index_path);
  if (old.value("index_crc32c", uint32_t{0}) != crc32c(text.data(), text.size())) return "";
  return text;
}

// Rank 0, before any batch file is written: refuse a folder that holds another run's output,
// clear temporaries a killed run left behind, save the index and this run's identity (its
// options and the index checksum; the time stamps only decide whether the index can be reused).
void prepare_output(const RunOptions& opt, const std::string& index_text, const json& stamps) {
  namespace fs = std::filesystem;
  const json identity = {{"made_by", made_by(opt)}, {"index_crc32c", crc32c(index_text.data(), index_text.size())}};
  const std::string run_path = join_path(opt.output, kRunFile);
  bool has_output = false;
  for (const auto& e : fs::directory_iterator(opt.output)) {
    const std::string name = e.path().filename().string();
    if (name.find(".tmp.") != std::string::npos &&
        (name.rfind("batch_", 0) == 0 || name.rfind(kDatasetJson, 0) == 0 || name.rfind(kIndexFile, 0) == 0 ||
         name.rfind(kRunFile, 0) == 0 || name.rfind(kRejectsFile, 0) == 0 || name.rfind(kMeanImageFile, 0) == 0)) {
      fs::remove(e.path());
      continue;
    }
    if (name.rfind("batch_", 0) == 0 || name == kDatasetJson) has_output = true;
  }
  if (file_exists(run_path) && has_output) {
    json old = read_run_file(run_path);
    old.erase("stamps");
    if (old != identity)
      fail_file(opt.output, "holds the output of a different datagen run (inputs, options or input contents "
                            "differ); use an empty folder");
    log_info("%s: resuming; batch files whose checksums verify are kept", opt.output.c_str());
  } else if (has_output) {
    fail_file(opt.output, "holds batch files of unknown origin; use an empty folder");
  }
  write_file_atomic(join_path(opt.output, kIndexFile), index_text);
  json run = identity;
  run["stamps"] = stamps;
  write_file_atomic(run_path, run.dump(2) + "\n");
}

class Worker {
 public:
  // lanes: the threads' GPU lanes with --gpu-resize, else nullptr; rank: for the log.
  // sharing: the ranks of this node per listed GPU (--gpu-route auto asks each for that many times
  // --gpu-min-saving).
  Worker(const RunOptions& opt, const InputIndex& index, const Plan& plan, const SampleSource& source, int threads,
         GpuLanes* lanes, int rank, int sharing = 1)
      : opt_(opt), index_(index), plan_(plan), source_(source), threads_(threads), shape_{}, lanes_(lanes),
        rank_(rank), sharing_(std::max(1, sharing)), sums_(size_t(threads)) {
    shape_ = {uint32_t(opt.size), uint32_t(opt.size), uint32_t(opt.channels)};
  }

  using Report = std::function<void(uint64_t b, const BatchFileEntry& e)>;

  // Makes (or keeps) batch files `files` with all threads and hands each to `writer`; calls
  // `report` on this thread, the one that may use MPI, for each file written.
  void run(const std::vector<uint64_t>& files, BatchWriter& writer, const Report& report) {
    make_files(files, writer, report);
    writer.finish();
    report_written(writer, report);
  }

  // The statistics of every sample made or kept, added to `total`.
  void add_sums_to(DatasetSums& total) {
    for (auto& s : sums_)
      if (s) total.merge(s->totals());
  }

  Phases phases(BatchWriter& writer) const {
    Phases p = phases_;
    p.write = writer.write_seconds();
    return p;
  }
  int kept() const { return kept_; }
  const std::vector<std::pair<uint64_t, std::string>>& rejects() const { return rejects_; }

 private:
  // The GPU can save at most the CPU's resize time, while starting it costs CUDA's start-up and
  // the pinned allocations (tenths of a second), and the process's exit pays again to release
  // them. Ranks sharing a GPU each pay that, and their batches take turns on it: two and four
  // ranks on one H100 came out 5-7 % slower than the CPU path where each rank expected to save
  // 0.5-0.7 s. So the automatic route starts the GPU only if the resize time left, per thread, is
  // at least --gpu-min-saving seconds times the ranks sharing the GPU. A thread that resized
  // `images` in `resize_s` seconds judges, for the files from `next` on.
  bool start_gpu_if_it_pays(double resize_s, double images, const std::vector<uint64_t>& files, size_t next) {
    uint64_t left = 0;
    for (size_t i = next; i < files.size(); ++i) left += plan_.file_end(files[i]) - plan_.file_begin(files[i]);
    const double saving = resize_s / images * double(left) / threads_, needed = opt_.gpu_min_saving * sharing_;
    if (saving < needed) {
      log_all("rank %d: --gpu-resize: resizing the %llu images left would take about %.2f s per thread, less than "
              "the %.2f s the GPU must save to pay for starting it (%.2f s x %d rank%s per GPU); the CPU resizes "
              "them (--gpu-route always overrides)",
              rank_, (unsigned long long)left, saving, needed, opt_.gpu_min_saving, sharing_, sharing_ > 1 ? "s" : "");
      return false;
    }
    log_all("rank %d: --gpu-resize: starting the GPU (about %.2f s of resize work left per thread)", rank_, saving);
    lanes_->start();
    return true;
  }

  // A batch file being made: its planned samples, each one's slot and what became of it.
  struct FileJob {
    uint64_t b = 0;
    std::vector<uint64_t> ids;
    std::vector<uint8_t> pixels;                // raw: slot i at i * shape bytes
    std::vector<std::vector<uint8_t>> encoded;  // JPEG: slot i's bytes
    std::vector<std::string> reason;            // "" or why slot i's sample is rejected
    std::atomic<size_t> left{0};                // samples not yet made
  };

  std::vector<uint64_t> planned(uint64_t b) const {
    return {plan_.order.begin() + long(plan_.file_begin(b)), plan_.order.begin() + long(plan_.file_end(b))};
  }

  void report_written(BatchWriter& writer, const Report& report) {
    for (const auto& [b, e] : writer.take_written()) report(b, e);
  }

  // One parallel region for all the files. Each thread takes the next sample from the queue,
  // whichever file it belongs to; the thread that finishes a file's last sample puts the file
  // together and hands it to the writer. No thread waits at the end of a file.
  // With --gpu-resize, a thread whose GPU lane is ready sends each sample where the lane's router
  // says; the GPU's results come back to their slots whenever the lane's batches are done (tag:
  // the file's position << 32 | slot), and a thread flushes its lane before it would block, so
  // that no file waits for samples held back. Under --gpu-route auto the first thread to have
  // resized kRouteSamples images, or to finish a file, judges from its own resize time whether
  // the GPU pays for the files not yet begun, and starts it if so: a run that leaves the GPU off
  // runs exactly the CPU path, plus that one judgement.
  void make_files(const std::vector<uint64_t>& files, BatchWriter& writer, const Report& report) {
    constexpr double kRouteSamples = 32;
    WorkQueue queue(files.size());
    std::vector<std::unique_ptr<FileJob>> jobs(files.size());
    std::vector<Phases> per_thread(static_cast<size_t>(threads_));
    std::atomic<bool> judged{!lanes_ || lanes_->started()};
    std::mutex fatal_mu;
    std::string fatal;
    Stopwatch wall;
#pragma omp parallel num_threads(threads_)
    {
      const int tid = omp_get_thread_num();
      Phases& t = per_thread[size_t(tid)];
      auto note_fatal = [&](const std::exception& e) {
        {
          std::lock_guard<std::mutex> lock(fatal_mu);
          if (fatal.empty()) fatal = e.what();
        }
        queue.stop();
        writer.stop(e.what());
      };
      // One more sample of the file at position `file` is done (made or rejected); returns
      // whether it was the file's last.
      auto done = [&](size_t file) {
        FileJob& f = *jobs[file];
        if (f.left.fetch_sub(1) != 1) return false;
        Stopwatch w;
        writer.submit(f.b, assemble(f.b, f.ids, std::move(f.pixels), f.encoded, f.reason), false);
        t.assemble += w.seconds();
        jobs[file].reset();
        return true;
      };
      const GpuLane::Deliver deliver = [&](size_t tag, const uint8_t* px) {
        const size_t file = tag >> 32, slot = tag & 0xffffffffu;
        FileJob& f = *jobs[file];
        const SlotOut out = slot_out(f, slot);
        Stopwatch w;
        if (out.encoded) {
          codec().encode_jpeg(px, opt_.size, opt_.size, opt_.channels, opt_.quality, *out.encoded);
          t.encode += w.seconds();
        } else {
          std::memcpy(out.raw, px, shape_.bytes());
          t.resize += w.seconds();
        }
        add_slot_to_sums(f, slot, out, t.gpu_images, t);
        done(file);
      };
      GpuLane* lane = nullptr;  // this thread's, once the lanes are ready
      GpuResizeTimes lane_before;
      const std::function<void()> flush = [&] {
        if (lane) lane->drain(deliver);
      };
      for (bool more = true; more;) {
        try {
          if (tid == 0) report_written(writer, report);
          const WorkQueue::Item item = queue.next(flush);
          more = item.kind != WorkQueue::Item::none;
          if (item.kind == WorkQueue::Item::begin) {
            std::vector<uint8_t> buffer = writer.begin_file(flush);
            const uint64_t b = files[item.file];
            std::vector<uint64_t> ids = planned(b);
            if (keep(b, ids, writer, t)) {
              queue.begun(item.file, 0);
              continue;
            }
            jobs[item.file] = start(b, std::move(ids), std::move(buffer));
            queue.begun(item.file, jobs[item.file]->ids.size());
          } else if (item.kind == WorkQueue::Item::sample) {
            if (!lane && lanes_ && (lane = lanes_->get(tid))) lane_before = lane->times();
            FileJob& f = *jobs[item.file];
            if (!lane) {
              make_slot(f, item.slot, t);
            } else if (route_slot(f, (uint64_t(item.file) << 32) | item.slot, *lane, deliver, t)) {
              continue;  // on the GPU: done when delivered
            }
            const bool last = done(item.file);
            if (!judged.load(std::memory_order_relaxed) && t.cpu_images > 0 &&
                (last || t.cpu_images >= kRouteSamples) && !judged.exchange(true))
              start_gpu_if_it_pays(t.resize, t.cpu_images, files, queue.files_begun());
          }
        } catch (const std::exception& e) {
          note_fatal(e);
        }
      }
      try {
        flush();
        if (lane) {
          GpuResizeTimes d = lane->times();
          t.gpu_stage += d.stage_s - lane_before.stage_s;
          t.gpu_upload += d.upload_s - lane_before.upload_s;
          t.gpu_kernel += d.kernel_s - lane_before.kernel_s;
          t.gpu_download += d.download_s - lane_before.download_s;
          t.gpu_wait += d.wait_s - lane_before.wait_s;
        }
      } catch (const std::exception& e) {
        note_fatal(e);
      }
    }
    if (!fatal.empty()) fail(fatal);
    Phases sum;
    for (const auto& t : per_thread) sum += t;
    sum.wait = std::max(0.0, wall.seconds() * threads_ - sum.busy());
    phases_ += sum;
  }

  // A batch file whose samples are about to be made, with `buffer` for its raw samples.
  std::unique_ptr<FileJob> start(uint64_t b, std::vector<uint64_t> ids, std::vector<uint8_t> buffer) const {
    auto f = std::make_unique<FileJob>();
    const size_t n = ids.size();
    f->b = b;
    f->ids = std::move(ids);
    if (opt_.encoding == Encoding::jpeg) {
      f->encoded.resize(n);
    } else {
      f->pixels = std::move(buffer);
      f->pixels.resize(n * shape_.bytes());
    }
    f->reason.resize(n);
    f->left = n;
    return f;
  }

  // Where slot i's sample goes: its raw pixels, or (JPEG output) its encoded bytes.
  struct SlotOut {
    uint8_t* raw = nullptr;
    std::vector<uint8_t>* encoded = nullptr;
  };
  SlotOut slot_out(FileJob& f, size_t i) const {
    if (opt_.encoding == Encoding::jpeg) return {nullptr, &f.encoded[i]};
    return {f.pixels.data() + i * shape_.bytes(), nullptr};
  }

  // Slot i's finished sample added to this thread's statistics; `path` counts where it was resized.
  void add_slot_to_sums(FileJob& f, size_t i, const SlotOut& out, double& path, Phases& t) {
    path += 1;
    Stopwatch w;
    add_to_sums(f.ids[i], out.raw, out.encoded);
    t.stats += w.seconds();
  }

  // Slot i's sample, made and added to this thread's statistics.
  void make_slot(FileJob& f, size_t i, Phases& t) {
    const SlotOut out = slot_out(f, i);
    f.reason[i] = make_sample(f.ids[i], out.raw, out.encoded, t);
    if (f.reason[i].empty()) add_slot_to_sums(f, i, out, t.cpu_images, t);
  }

  ImageCodec& codec() {
    thread_local std::unique_ptr<ImageCodec> c;
    if (!c) c = std::make_unique<ImageCodec>();
    return *c;
  }

  // This thread's statistics, made on first use.
  SampleSums& sums() {
    auto& s = sums_[size_t(omp_get_thread_num())];
    if (!s) s = std::make_unique<SampleSums>(index_.classes.size(), shape_);
    return *s;
  }

  // Sample `id` (raw pixels, or JPEG bytes decoded as a loader will) into this thread's statistics.
  void add_to_sums(uint64_t id, const uint8_t* raw, const std::vector<uint8_t>* jpeg) {
    const int32_t label = index_.entries[id].label;
    if (raw) return sums().add(raw, label);
    DecodeLimits unlimited;
    const cv::Mat img = codec().decode(jpeg->data(), jpeg->size(), opt_.channels, 0, unlimited);
    if (img.total() * img.channels() != shape_.bytes() || !img.isContinuous())
      fail("internal: a re-encoded sample decodes to the wrong size");
    sums().add(img.data, label);
  }

  // Room in this thread's reused decode buffer for a width x height image. Decoding into fresh
  // memory for every image costs an mmap, page faults and an munmap each, which many threads
  // then queue for (and more so once CUDA watches the address space).
  struct Scratch {
    std::vector<uint8_t> buffer;
    int width = 0, height = 0;
    uint8_t* place(int w, int h, int channels) {
      const size_t need = size_t(w) * size_t(h) * size_t(channels);
      if (buffer.size() < need) buffer.resize(need);
      width = w, height = h;
      return buffer.data();
    }
    cv::Mat image(int channels) { return cv::Mat(height, width, CV_8UC(channels), buffer.data()); }
  };
  Scratch& scratch() {
    thread_local Scratch s;
    return s;
  }

  // One sample into its slot; returns "" or the reason it is rejected.
  std::string make_sample(uint64_t id, uint8_t* raw, std::vector<uint8_t>* jpeg, Phases& t) {
    thread_local std::vector<uint8_t> bytes;
    Stopwatch w;
    source_.read(id, bytes);
    t.read += w.lap();
    try {
      Scratch& sc = scratch();
      const ImageCodec::Placement place = [&](int width, int height) { return sc.place(width, height, opt_.channels); };
      cv::Mat img = codec().decode(bytes.data(), bytes.size(), opt_.channels, opt_.size, opt_.limits, place);
      if (img.empty()) img = sc.image(opt_.channels);
      t.decode += w.lap();
      resize_on_cpu(img, raw, jpeg, t);
      return "";
    } catch (const RejectError& e) {
      return e.what();
    } catch (const cv::Exception& e) {
      return std::string("image cannot be decoded or resized: ") + e.err;
    }
  }

  // A decoded image resized (and, for JPEG output, encoded) by this thread into its slot;
  // returns the resize's seconds.
  double resize_on_cpu(const cv::Mat& img, uint8_t* raw, std::vector<uint8_t>* jpeg, Phases& t) {
    Stopwatch w;
    double resize_s = 0;
    if (jpeg) {
      thread_local std::vector<uint8_t> pixels;
      pixels.resize(shape_.bytes());
      resize_to_square(img, opt_.size, opt_.resize, pixels.data());
      t.resize += resize_s = w.lap();
      codec().encode_jpeg(pixels.data(), opt_.size, opt_.size, opt_.channels, opt_.quality, *jpeg);
      t.encode += w.lap();
    } else {
      resize_to_square(img, opt_.size, opt_.resize, raw);
      t.resize += resize_s = w.lap();
    }
    return resize_s;
  }

  // The batch file from its slots: the made samples in slot order, compacted in place (a rejected
  // sample leaves no gap), the rejected ones to the rejects.
  Batch assemble(uint64_t b, const std::vector<uint64_t>& ids, std::vector<uint8_t> pixels,
                 std::vector<std::vector<uint8_t>>& encoded, const std::vector<std::string>& reason) {
    const size_t bytes = shape_.bytes();
    const bool jpeg = opt_.encoding == Encoding::jpeg;
    Batch batch;
    batch.shape = shape_;
    batch.encoding = opt_.encoding;
    batch.batch_index = uint32_t(b);
    batch.images = std::move(pixels);
    if (jpeg) batch.images.clear(), batch.offsets.push_back(0);
    std::vector<std::pair<uint64_t, std::string>> rejected;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (!reason[i].empty()) {
        rejected.emplace_back(ids[i], reason[i]);
        continue;
      }
      if (jpeg) {
        batch.images.insert(batch.images.end(), encoded[i].begin(), encoded[i].end());
        batch.offsets.push_back(batch.images.size());
      } else if (batch.count() != i) {
        std::memmove(batch.images.data() + batch.count() * bytes, batch.images.data() + i * bytes, bytes);
      }
      batch.labels.push_back(index_.entries[ids[i]].label);
      batch.ids.push_back(int64_t(ids[i]));
    }
    if (!jpeg) batch.images.resize(batch.count() * bytes);
    std::lock_guard<std::mutex> lock(rejects_mu_);
    rejects_.insert(rejects_.end(), rejected.begin(), rejected.end());
    return batch;
  }

  // --gpu-resize: slot `tag & 0xffffffff` of f read, decoded and, where the lane's router says the
  // GPU is cheaper, staged (decoded straight into pinned memory when the codec can; deliver(tag)
  // receives it once resized): returns true then. Otherwise it is resized here, or rejected, as
  // make_slot does, and false is returned.
  bool route_slot(FileJob& f, uint64_t tag, GpuLane& l, const GpuLane::Deliver& deliver, Phases& t) {
    const size_t i = size_t(tag & 0xffffffffu);
    const SlotOut out = slot_out(f, i);
    thread_local std::vector<uint8_t> bytes;
    Stopwatch w;
    source_.read(f.ids[i], bytes);
    t.read += w.lap();
    bool asked = false, placed = false;
    double staging_s = 0;  // in stage(): the lane's wait and earlier samples' deliveries, counted there
    Scratch& sc = scratch();
    const ImageCodec::Placement place = [&](int width, int height) -> uint8_t* {
      asked = true;
      if (!l.take(width, height)) return sc.place(width, height, opt_.channels);
      placed = true;
      Stopwatch ws;
      uint8_t* p = l.stage(width, height, size_t(tag), deliver);
      staging_s = ws.seconds();
      return p;
    };
    try {
      cv::Mat img = codec().decode(bytes.data(), bytes.size(), opt_.channels, opt_.size, opt_.limits, place);
      t.decode += w.lap() - staging_s;
      if (placed) return true;
      if (img.empty()) img = sc.image(opt_.channels);
      if (!asked && l.take(img.cols, img.rows)) {
        l.add(img.data, img.step[0], img.cols, img.rows, size_t(tag), deliver);
        return true;
      }
      l.note_cpu(img.cols, img.rows, resize_on_cpu(img, out.raw, out.encoded, t));
    } catch (const RejectError& e) {
      if (placed) l.drop_last();
      f.reason[i] = e.what();
      return false;
    } catch (const cv::Exception& e) {
      if (placed) l.drop_last();
      f.reason[i] = std::string("image cannot be decoded or resized: ") + e.err;
      return false;
    }
    add_slot_to_sums(f, i, out, t.cpu_images, t);
    return false;
  }

  // Batch file b from an earlier run, when it can be kept (see try_keep): its samples go into the
  // statistics and the file to the writer. Returns whether it was kept.
  bool keep(uint64_t b, const std::vector<uint64_t>& ids, BatchWriter& writer, Phases& t) {
    const std::string path = join_path(opt_.output, batch_file_name(b));
    if (!file_exists(path)) return false;
    Batch batch;
    std::vector<std::pair<uint64_t, std::string>> missing;
    if (!try_keep(path, b, ids, batch, missing)) return false;
    Stopwatch w;
    for (size_t i = 0; i < batch.count(); ++i) {
      const uint64_t id = uint64_t(batch.ids[i]);
      if (batch.encoding == Encoding::raw) {
        add_to_sums(id, batch.raw_image(i), nullptr);
      } else {
        const auto begin = batch.images.begin();
        const std::vector<uint8_t> bytes(begin + long(batch.offsets[i]), begin + long(batch.offsets[i + 1]));
        add_to_sums(id, nullptr, &bytes);
      }
    }
    t.stats += w.seconds();
    {
      std::lock_guard<std::mutex> lock(rejects_mu_);
      rejects_.insert(rejects_.end(), missing.begin(), missing.end());
      ++kept_;
    }
    writer.submit(b, std::move(batch), true);
    return true;
  }

  // A batch file from an earlier run is kept when its checksums verify, it is the file the plan
  // asks for, and every planned sample missing from it is still rejected today (those go to
  // `missing`, with the reason).
  bool try_keep(const std::string& path, uint64_t b, const std::vector<uint64_t>& ids, Batch& batch,
                std::vector<std::pair<uint64_t, std::string>>& missing) {
    auto redo = [&](const std::string& why) {
      log_all("%s: made again (%s)", path.c_str(), why.c_str());
      return false;
    };
    try {
      batch = read_batch_file(path);  // verifies every checksum
    } catch (const Error& e) {
      return redo(e.what());
    }
    if (batch.batch_index != b || !(batch.shape == shape_) || batch.encoding != opt_.encoding)
      return redo("made with other options");
    size_t at = 0;
    for (uint64_t id : ids) {
      if (at < batch.count() && uint64_t(batch.ids[at]) == id) {
        if (batch.labels[at] != index_.entries[id].label) return redo("labels differ from the plan");
        ++at;
        continue;
      }
      missing.emplace_back(id, "");
    }
    if (at != batch.count()) return redo("samples differ from the plan");
    Phases t;
    std::vector<uint8_t> scratch(shape_.bytes()), enc;
    for (auto& m : missing) {
      m.second = make_sample(m.first, scratch.data(), opt_.encoding == Encoding::jpeg ? &enc : nullptr, t);
      if (m.second.empty()) return redo("a sample missing from it can be made now");
    }
    return true;
  }

  const RunOptions& opt_;
  const InputIndex& index_;
  const Plan& plan_;
  const SampleSource& source_;
  int threads_;
  ImageShape shape_;
  Phases phases_;
  GpuLanes* lanes_ = nullptr;  // one GpuLane per OpenMP thread, with --gpu-resize
  int rank_ = 0;
  int sharing_ = 1;
  std::vector<std::unique_ptr<SampleSums>> sums_;  // per OpenMP thread
  std::mutex rejects_mu_;
  std::vector<std::pair<uint64_t, std::string>> rejects_;
  int kept_ = 0;
};

std::string mean_image_png(const std::vector<uint8_t>& img, int size, int channels) {
  return png_encode(img.data(), size, size, channels);
}

std::string tsv_field(std::string s) {
  for (char& c : s)
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  return s;
}

}  // namespace

std::string batch_file_name(uint64_t b) {
  char name[32];
  std::snprintf(name, sizeof name, "batch_%05llu.cvb", (unsigned long long)b);
  return name;
}

void validate_run_options(const RunOptions& opt) {
  if (opt.inputs.empty()) fail("--input is required (a tar, a compressed tar or a folder; may be given several times)");
  if (opt.output.empty()) fail("--output is required (the dataset folder to write)");
  if (opt.size < 1 || opt.size > 16384) fail("--size must be between 1 and 16384, not " + std::to_string(opt.size));
  if (opt.channels != 1 && opt.channels != 3) fail("--channels must be 1 or 3, not " + std::to_string(opt.channels));
  if (opt.per_file < 1) fail("--per-file must be at least 1");
  // A rank holds at least two batch files in memory (one being written, one being made).
  const double batch_gib = double(opt.per_file) * opt.size * opt.size * opt.channels / double(1ull << 30);
  if (batch_gib > 4.0)
    fail("--per-file " + std::to_string(opt.per_file) + " at --size " + std::to_string(opt.size) + " makes batch files of " +
         std::to_string(int(batch_gib)) +
         " GiB; each rank holds at least two in memory, so use a smaller --per-file (at most 4 GiB each)");
  if (opt.threads < 0) fail("--threads must be 0 (automatic) or more");
  if (opt.resize == ResizePolicy::short_side)
    fail("--resize short keeps the aspect ratio and so gives images of different sizes, which batch files "
         "(one image shape each) cannot hold; use --resize crop or squash");
  if (opt.encoding == Encoding::jpeg && (opt.quality < 1 || opt.quality > 100))
    fail("--quality must be between 1 and 100, not " + std::to_string(opt.quality));
  if (opt.limits.max_pixels < 1) fail("--max-pixels must be at least 1");
  if (opt.limits.max_aspect < 1) fail("--max-aspect must be at least 1");
  if (!(opt.gpu_min_saving >= 0)) fail("--gpu-min-saving must be 0 or more seconds");
  if (opt.gpu_resize) gpu_resize_check_available();
  for (const auto& in : opt.inputs) {
    if (::access(in.c_str(), R_OK) != 0) fail_file(in, "input cannot be read: " + errno_text());
  }
  for (const auto* f : {&opt.classes_file, &opt.labels_file})
    if (!f->empty() && ::access(f->c_str(), R_OK) != 0) fail_file(*f, "cannot be read: " + errno_text());
  struct stat st {};
  if (::stat(opt.output.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) fail_file(opt.output, "--output exists and is not a folder");
}

namespace {
std::string gpu_state(const GpuLanes* lanes) {
  if (!lanes || !lanes->started()) return "not started";
  if (lanes->device() < 0) return "started, not ready";
  char buf[64];
  std::snprintf(buf, sizeof buf, "CUDA device %d, ready after %.2f s", lanes->device(), lanes->ready_seconds());
  return buf;
}
}  // namespace

int run_datagen(const RunOptions& opt, const MpiContext& mpi) {
  Stopwatch total;
  validate_run_options(opt);
  const int rank = mpi.rank(), ranks = mpi.size();
  int threads = opt.threads;
  if (threads == 0) threads = std::max(1, int(std::thread::hardware_concurrency()) / std::max(1, mpi.local_size()));
  std::unique_ptr<GpuLanes> lanes;
  if (opt.gpu_resize) {
    GpuResizeOptions o;
    o.device = -1;  // chosen when the lanes start, so that a rank that never uses them never starts CUDA
    o.size = opt.size;
    o.policy = opt.resize;
    o.channels = opt.channels;
    lanes = std::make_unique<GpuLanes>(o, threads, opt.gpu_always, mpi.local_rank());
  }

  // Scan on rank 0; the index (or the error) goes to everyone.
  std::string text, error;
  double scan_seconds = 0;
  if (rank == 0) {
    try {
      make_dirs(opt.output);
      Stopwatch w;
      const json stamps = input_stamps(opt);
      text = saved_index(opt, stamps);
      if (!text.empty()) {
        log_info("inputs unchanged since the index in %s was made: reusing it", opt.output.c_str());
      } else {
        InputIndex idx = scan_inputs({opt.inputs, opt.classes_file, opt.labels_file});
        if (idx.entries.empty()) fail("no images found in the inputs (see the refused members above, if any)");
        text = serialize_index(idx);
      }
      scan_seconds = w.seconds();
      prepare_output(opt, text, stamps);
    } catch (const std::exception& e) {  // any failure here must reach the other ranks
      error = e.what();
    }
  }
  if (ranks > 1) {
    bcast_string(error, 0);
    if (error.empty()) bcast_string(text, 0);
  }
  if (!error.empty()) throw Error(error);
  if (ranks > 1) {
    // Rank 0 alone writes dataset.json, so every rank must write into the very same folder.
    int shared = file_exists(join_path(opt.output, kRunFile)) ? 1 : 0, all_shared = 0;
    CONVOY_MPI_CHECK(MPI_Allreduce(&shared, &all_shared, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (!all_shared)
      fail_file(opt.output, "is not visible to every rank; under mpirun across nodes --output must be on a file "
                            "system all nodes share");
  }
  const InputIndex index = parse_index(text, join_path(opt.output, kIndexFile));
  std::string().swap(text);  // the text is as large as the index: not held through the run beside it
  for (const auto& in : index.inputs)
    log_info("%s: %s input", in.path.c_str(), in.kind == InputKind::stream ? "compressed (streamed, no random access)" :
                                             in.kind == InputKind::folder ? "folder" : "tar (random access)");
  log_info("index of %zu images in %.2f s (%zu classes, %llu non-image members skipped, %zu refused)",
           index.entries.size(), scan_seconds, index.classes.size(), (unsigned long long)index.skipped,
           index.rejects.size());

  Stopwatch plan_clock;
  const Plan plan = make_plan(index.entries.size(), opt.per_file, opt.seed);
  const uint64_t files = plan.num_files();
  std::vector<uint64_t> mine_ids, files_per_rank(size_t(ranks), 0);
  for (uint64_t b = 0; b < files; ++b) {
    ++files_per_rank[size_t(plan.owner(b, ranks))];
    if (plan.owner(b, ranks) == rank)
      mine_ids.insert(mine_ids.end(), plan.order.begin() + long(plan.file_begin(b)), plan.order.begin() + long(plan.file_end(b)));
  }
  if (opt.index_only) {
    log_info("plan of %llu batch files in %.2f s; --index-only: stopping before decoding", (unsigned long long)files,
             plan_clock.seconds());
    const auto complete = [](const InputInfo& in) { return in.complete; };
    return std::all_of(index.inputs.begin(), index.inputs.end(), complete) ? 0 : 2;
  }
  cv::setNumThreads(1);  // the OpenMP threads are the parallelism; OpenCV must not add its own

  DatasetSums sums(index.classes.size(), {uint32_t(opt.size), uint32_t(opt.size), uint32_t(opt.channels)});
  json mine = {{"files", json::array()}, {"rejects", json::array()}, {"kept", 0}};
  Phases phases;
  try {
    Stopwatch w;
    const SampleSource source(index, mine_ids);
    phases.read += w.seconds();
    std::vector<uint64_t> my_files;
    for (uint64_t b = uint64_t(rank); b < files; b += uint64_t(ranks)) my_files.push_back(b);
    // The batch files a rank holds at once: the one being made, the end of the one before, and
    // those being written, by one writer per two threads (a writer spends most of a file waiting
    // for fsync, and at 16 threads a file is made in a few ms); fewer when they are large, so that
    // they stay within 8 GiB (a file is at most 4 GiB).
    const double file_bytes = double(opt.per_file) * double(sums.pixel_sum.size());
    const size_t in_memory = std::clamp<size_t>(size_t(8.0 * double(1ull << 30) / std::max(1.0, file_bytes)), 2,
                                                2 + size_t(threads + 1) / 2);
    BatchWriter writer(opt.output, in_memory, int(std::max<size_t>(1, in_memory - 2)));
    if (lanes && opt.gpu_always) lanes->wait_ready();
    const int listed = lanes ? std::max(1, gpu_resize_listed_gpus()) : 1;
    Worker worker(opt, index, plan, source, threads, lanes.get(), rank, (mpi.local_size() + listed - 1) / listed);
    Progress progress(mpi, index.entries.size(), files_per_rank);
    // MPI stays on this thread (MPI_THREAD_FUNNELED): the worker reports each written file here.
    worker.run(my_files, writer, [&](uint64_t b, const BatchFileEntry& e) {
      mine["files"].push_back({b, e.name, e.count, e.bytes, e.crc32c});
      progress.file_done(plan.file_end(b) - plan.file_begin(b));
    });
    worker.add_sums_to(sums);
    mine["kept"] = worker.kept();
    for (const auto& r : worker.rejects()) mine["rejects"].push_back({r.first, r.second});
    phases += worker.phases(writer);
    Stopwatch wait;
    progress.finish();
    CONVOY_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    phases.wait += wait.seconds();
  } catch (const std::exception& e) {  // the other ranks may be waiting: end the whole job
    std::fprintf(stderr, "datagen: error: %s\n", e.what());
    mpi.abort(1);
  }
  mine["phases"] = phases.to_json(opt.gpu_resize);
  sums.reduce_to_root(mpi);
  const auto all = gather_strings(mine.dump(), mpi);
  int status = 0;
  for (const auto& in : index.inputs) status = in.complete ? status : 2;
  if (rank != 0) return status;

  DatasetMeta meta;
  meta.classes = index.classes;
  meta.class_counts = sums.class_counts;
  meta.num_samples = sums.samples;
  meta.shape = {uint32_t(opt.size), uint32_t(opt.size), uint32_t(opt.channels)};
  meta.encoding = opt.encoding;
  meta.per_file = opt.per_file;
  meta.mean = sums.mean();
  meta.std = sums.stddev();
  meta.skipped = index.skipped;
  meta.made_by = made_by(opt);
  meta.mean_image = kMeanImageFile;
  std::vector<std::pair<uint64_t, BatchFileEntry>> entries;
  std::vector<std::pair<uint64_t, std::string>> rejects;
  Phases sum;
  int kept = 0;
  for (const auto& s : all) {
    const json j = json::parse(s);
    for (const auto& f : j["files"])
      entries.push_back({f[0].get<uint64_t>(), {f[1].get<std::string>(), f[2].get<uint32_t>(), f[3].get<uint64_t>(), f[4].get<uint32_t>()}});
    for (const auto& r : j["rejects"]) rejects.emplace_back(r[0].get<uint64_t>(), r[1].get<std::string>());
    sum += Phases::from_json(j["phases"]);
    kept += j["kept"].get<int>();
  }
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& e : entries) meta.files.push_back(e.second);
  std::sort(rejects.begin(), rejects.end());
  meta.rejected = index.rejects.size() + rejects.size();

  std::string tsv = "input\tmember\treason\n";
  for (const auto& r : index.rejects) tsv += tsv_field(r.input) + "\t" + tsv_field(r.member) + "\t" + tsv_field(r.reason) + "\n";
  for (const auto& [id, why] : rejects) {
    const IndexEntry& e = index.entries[id];
    const std::string member(e.path);
    tsv += tsv_field(index.inputs[e.input].path) + "\t" + tsv_field(member) + "\t" + tsv_field(why) + "\n";
  }
  write_file_atomic(join_path(opt.output, kRejectsFile), tsv);
  write_file_atomic(join_path(opt.output, kMeanImageFile), mean_image_png(sums.mean_image(), opt.size, opt.channels));

  meta.timings = {{"ranks", ranks},     {"threads", threads},          {"seconds", total.seconds()},
                  {"scan_seconds", scan_seconds}, {"phases", sum.to_json(opt.gpu_resize)}, {"kept_files", kept},
                  {"gpu_resize", opt.gpu_resize}};
  write_dataset_meta(opt.output, meta);

  const double secs = total.seconds();
  log_info("wrote %zu batch files (%d kept from an earlier run), %llu samples, %llu rejected (see %s), %llu skipped, "
           "in %.2f s (%.0f images/s)",
           meta.files.size(), kept, (unsigned long long)meta.num_samples, (unsigned long long)meta.rejected, kRejectsFile,
           (unsigned long long)meta.skipped, secs, secs > 0 ? double(meta.num_samples) / secs : 0.0);
  log_info("phases, seconds summed over threads and ranks: read %.2f, decode %.2f, resize %.2f, encode %.2f, "
           "stats %.2f, assemble %.2f, write %.2f, wait %.2f",
           sum.read, sum.decode, sum.resize, sum.encode, sum.stats, sum.assemble, sum.write, sum.wait);
  if (opt.gpu_resize)
    log_info("GPU phases, seconds summed over threads and ranks: stage %.2f, upload %.2f, kernel %.2f, download %.2f, "
             "wait %.2f; images resized on the GPU %.0f, on the CPU %.0f (rank 0's GPU: %s)",
             sum.gpu_stage, sum.gpu_upload, sum.gpu_kernel, sum.gpu_download, sum.gpu_wait, sum.gpu_images,
             sum.cpu_images, gpu_state(lanes.get()).c_str());
  for (const auto& in : index.inputs)
    if (!in.complete) std::fprintf(stderr, "datagen: error: incomplete input: %s\n", in.error.c_str());
  if (status) log_info("the dataset holds every member that could be read; the run is incomplete (exit status 2)");
  return status;
}

}  // namespace convoy::datagen
