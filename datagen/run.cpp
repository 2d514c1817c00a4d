// The run. Every rank computes the same plan from the broadcast index; batch file b is made by
// rank b mod N alone, its samples decoded in parallel into their slots and compacted in slot
// order, so its bytes depend only on the inputs, the options and the seed.
#include "datagen/run.h"

#include <omp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <opencv2/core.hpp>
#include <thread>

#include "datagen/gpu_lanes.h"
#include "datagen/gpu_resize.h"
#include "datagen/index.h"
#include "datagen/plan.h"
#include "datagen/png_codec.h"
#include "datagen/progress.h"
#include "datagen/sample_source.h"
#include "datagen/stats.h"
#include "shared/atomic_file.h"
#include "shared/crc32c.h"
#include "shared/dataset_meta.h"
#include "shared/error.h"
#include "shared/log.h"
#include "shared/timer.h"

namespace convoy::datagen {
namespace {

using nlohmann::json;

// Seconds spent per phase, summed over threads (and later over ranks). With --gpu-resize, resize
// is the host's copying of finished samples into their slots, and the GPU parts are apart:
// gpu_stage (host: into pinned memory; decoding straight into it is counted as decode),
// gpu_upload, gpu_kernel, gpu_download (device time from CUDA events) and gpu_wait (host: blocked
// on the GPU). gpu_images and cpu_images count where the router sent each image.
struct Phases {
  double read = 0, decode = 0, resize = 0, encode = 0, write = 0, wait = 0;
  double gpu_stage = 0, gpu_upload = 0, gpu_kernel = 0, gpu_download = 0, gpu_wait = 0;
  double gpu_images = 0, cpu_images = 0;
  Phases& operator+=(const Phases& o) {
    read += o.read, decode += o.decode, resize += o.resize, encode += o.encode, write += o.write, wait += o.wait;
    gpu_stage += o.gpu_stage, gpu_upload += o.gpu_upload, gpu_kernel += o.gpu_kernel;
    gpu_download += o.gpu_download, gpu_wait += o.gpu_wait;
    gpu_images += o.gpu_images, cpu_images += o.cpu_images;
    return *this;
  }
  json to_json(bool gpu) const {
    json j = {{"read", read}, {"decode", decode}, {"resize", resize}, {"encode", encode}, {"write", write}, {"wait", wait}};
    if (gpu) {
      j["gpu_stage"] = gpu_stage, j["gpu_upload"] = gpu_upload, j["gpu_kernel"] = gpu_kernel;
      j["gpu_download"] = gpu_download, j["gpu_wait"] = gpu_wait;
      j["gpu_images"] = gpu_images, j["cpu_images"] = cpu_images;
    }
    return j;
  }
  static Phases from_json(const json& p) {
    Phases t{p["read"], p["decode"], p["resize"], p["encode"], p["write"], p["wait"]};
    t.gpu_stage = p.value("gpu_stage", 0.0), t.gpu_upload = p.value("gpu_upload", 0.0);
    t.gpu_kernel = p.value("gpu_kernel", 0.0), t.gpu_download = p.value("gpu_download", 0.0);
    t.gpu_wait = p.value("gpu_wait", 0.0);
    t.gpu_images = p.value("gpu_images", 0.0), t.cpu_images = p.value("cpu_images", 0.0);
    return t;
  }
  // Host seconds the decoding threads spent working (not waiting for work).
  double busy() const { return read + decode + resize + encode + gpu_stage + gpu_wait; }
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
  // lanes: the threads' GPU lanes with --gpu-resize, else nullptr.
  Worker(const RunOptions& opt, const InputIndex& index, const Plan& plan, const SampleSource& source, int threads,
         GpuLanes* lanes)
      : opt_(opt), index_(index), plan_(plan), source_(source), threads_(threads), shape_{}, lanes_(lanes) {
    shape_ = {uint32_t(opt.size), uint32_t(opt.size), uint32_t(opt.channels)};
  }

  // A batch file's content, made (or kept from an earlier run) and not yet written.
  struct Made {
    uint64_t b = 0;
    Batch batch;
    bool kept = false;
  };

  // Decodes batch file b's samples with all threads (or keeps the file); adds its rejects.
  Made make(uint64_t b, std::vector<std::pair<uint64_t, std::string>>& rejects) {
    const std::string path = join_path(opt_.output, batch_file_name(b));
    std::vector<uint64_t> ids(plan_.order.begin() + long(plan_.file_begin(b)), plan_.order.begin() + long(plan_.file_end(b)));
    Made m;
    m.b = b;
    if (file_exists(path)) m.kept = try_keep(path, b, ids, m.batch, rejects);
    if (!m.kept) m.batch = build(b, ids, rejects);
    return m;
  }

  // Writes it and adds it to the statistics. Runs beside the next make(), one at a time.
  BatchFileEntry finish(const Made& m, DatasetSums& sums) {
    const std::string name = batch_file_name(m.b), path = join_path(opt_.output, name);
    if (!m.kept) {
      Stopwatch w;
      write_batch_file(path, m.batch);
      write_seconds_ += w.seconds();
    }
    const BatchHeader h = read_batch_header(path);
    sums.add(m.batch, codec());
    return {name, uint32_t(m.batch.count()), h.file_bytes, h.header_crc};
  }

  Phases phases() const {
    Phases p = phases_;
    p.write = write_seconds_;
    return p;
  }

  // The CPU's resize seconds per image so far, summed over threads; < 0 before any was made.
  double resize_seconds_per_image() const { return images_built_ ? phases_.resize / double(images_built_) : -1; }

 private:
  ImageCodec& codec() {
    thread_local std::unique_ptr<ImageCodec> c;
    if (!c) c = std::make_unique<ImageCodec>();
    return *c;
  }

  // One sample into its slot; returns "" or the reason it is rejected.
  std::string make_sample(uint64_t id, uint8_t* raw, std::vector<uint8_t>* jpeg, Phases& t) {
    thread_local std::vector<uint8_t> bytes;
    Stopwatch w;
    source_.read(id, bytes);
    t.read += w.lap();
    try {
      cv::Mat img = codec().decode(bytes.data(), bytes.size(), opt_.channels, opt_.size, opt_.limits);
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

  // --gpu-resize: one sample read, decoded and, where the lane's router says the GPU is cheaper,
  // staged (decoded straight into pinned memory when the codec can; deliver() receives it once
  // resized), else resized here like make_sample. Returns "" or the reason it is rejected.
  std::string route_sample(uint64_t id, size_t slot, GpuLane& l, const GpuLane::Deliver& deliver, uint8_t* raw,
                           std::vector<uint8_t>* jpeg, Phases& t) {
    thread_local std::vector<uint8_t> bytes;
    Stopwatch w;
    source_.read(id, bytes);
    t.read += w.lap();
    bool asked = false, placed = false;
    const ImageCodec::Placement place = [&](int width, int height) -> uint8_t* {
      asked = true;
      if (!l.take(width, height)) return nullptr;
      placed = true;
      return l.stage(width, height, slot, deliver);
    };
    try {
      cv::Mat img = codec().decode(bytes.data(), bytes.size(), opt_.channels, opt_.size, opt_.limits, place);
      t.decode += w.lap();
      if (placed) return "";
      if (!asked && l.take(img.cols, img.rows)) {
        l.add(img.data, img.step[0], img.cols, img.rows, slot, deliver);
        return "";
      }
      l.note_cpu(img.cols, img.rows, resize_on_cpu(img, raw, jpeg, t));
      return "";
    } catch (const RejectError& e) {
      if (placed) l.drop_last();
      return e.what();
    } catch (const cv::Exception& e) {
      if (placed) l.drop_last();
      return std::string("image cannot be decoded or resized: ") + e.err;
    }
  }

  Batch build(uint64_t b, const std::vector<uint64_t>& ids, std::vector<std::pair<uint64_t, std::string>>& rejects) {
    const size_t n = ids.size(), bytes = shape_.bytes();
    const bool jpeg = opt_.encoding == Encoding::jpeg;
    std::vector<uint8_t> pixels(jpeg ? 0 : n * bytes);
    std::vector<std::vector<uint8_t>> encoded(jpeg ? n : 0);
    std::vector<std::string> reason(n);
    std::vector<Phases> per_thread(static_cast<size_t>(threads_));
    std::string fatal;
    Stopwatch wall;
    // Without --gpu-resize, or while the GPU lanes are still being made, the CPU resizes. Decided
    // once per file, so that every thread of the team runs the same loop.
    bool gpu = false;
    if (lanes_) gpu = lanes_->get(0) != nullptr;
#pragma omp parallel num_threads(threads_)
    {
      Phases& t = per_thread[size_t(omp_get_thread_num())];
      auto note_fatal = [&](const std::exception& e) {
#pragma omp critical(datagen_fatal)
        if (fatal.empty()) fatal = e.what();
      };
      GpuLane* l = gpu ? lanes_->get(omp_get_thread_num()) : nullptr;
      // Results from the GPU arrive in whatever order batches finish; each goes to its own slot.
      const GpuLane::Deliver deliver = [&](size_t slot, const uint8_t* px) {
        Stopwatch w;
        if (jpeg) {
          codec().encode_jpeg(px, opt_.size, opt_.size, opt_.channels, opt_.quality, encoded[slot]);
          t.encode += w.seconds();
        } else {
          std::memcpy(pixels.data() + slot * bytes, px, bytes);
          t.resize += w.seconds();
        }
      };
      const GpuResizeTimes before = l ? l->times() : GpuResizeTimes{};
      const uint64_t gpu_before = l ? l->router().gpu_images() : 0, cpu_before = l ? l->router().cpu_images() : 0;
      bool failed = false;
#pragma omp for schedule(dynamic, 1)
      for (size_t i = 0; i < n; ++i) {
        if (failed) continue;
        uint8_t* raw = jpeg ? nullptr : pixels.data() + i * bytes;
        std::vector<uint8_t>* enc = jpeg ? &encoded[i] : nullptr;
        try {
          if (l) {
            reason[i] = route_sample(ids[i], i, *l, deliver, raw, enc, t);
          } else {
            reason[i] = make_sample(ids[i], raw, enc, t);
            if (lanes_ && reason[i].empty()) t.cpu_images += 1;
          }
        } catch (const std::exception& e) {
          note_fatal(e);
          failed = true;
        }
      }
      if (l != nullptr && !failed) {
        try {
          l->drain(deliver);
          const GpuResizeTimes after = l->times();
          t.gpu_stage += after.stage_s - before.stage_s;
          t.gpu_upload += after.upload_s - before.upload_s;
          t.gpu_kernel += after.kernel_s - before.kernel_s;
          t.gpu_download += after.download_s - before.download_s;
          t.gpu_wait += after.wait_s - before.wait_s;
          t.gpu_images += double(l->router().gpu_images() - gpu_before);
          t.cpu_images += double(l->router().cpu_images() - cpu_before);
        } catch (const std::exception& e) {
          note_fatal(e);
        }
      }
    }
    if (!fatal.empty()) fail(fatal);
    Phases sum;
    for (const auto& t : per_thread) sum += t;
    sum.wait = std::max(0.0, wall.seconds() * threads_ - sum.busy());
    phases_ += sum;
    images_built_ += n;

    Batch batch;
    batch.shape = shape_;
    batch.encoding = opt_.encoding;
    batch.batch_index = uint32_t(b);
    if (jpeg) batch.offsets.push_back(0);
    for (size_t i = 0; i < n; ++i) {
      if (!reason[i].empty()) {
        rejects.emplace_back(ids[i], reason[i]);
        continue;
      }
      batch.labels.push_back(index_.entries[ids[i]].label);
      batch.ids.push_back(int64_t(ids[i]));
      if (jpeg) {
        batch.images.insert(batch.images.end(), encoded[i].begin(), encoded[i].end());
        batch.offsets.push_back(batch.images.size());
      } else {
        batch.images.insert(batch.images.end(), pixels.begin() + long(i * bytes), pixels.begin() + long((i + 1) * bytes));
      }
    }
    return batch;
  }

  // A batch file from an earlier run is kept when its checksums verify, it is the file the plan
  // asks for, and every planned sample missing from it is still rejected today.
  bool try_keep(const std::string& path, uint64_t b, const std::vector<uint64_t>& ids, Batch& batch,
                std::vector<std::pair<uint64_t, std::string>>& rejects) {
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
    std::vector<std::pair<uint64_t, std::string>> missing;
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
    rejects.insert(rejects.end(), missing.begin(), missing.end());
    return true;
  }

  const RunOptions& opt_;
  const InputIndex& index_;
  const Plan& plan_;
  const SampleSource& source_;
  int threads_;
  ImageShape shape_;
  Phases phases_;
  double write_seconds_ = 0;  // kept apart: the writer runs beside the decoding threads
  uint64_t images_built_ = 0;
  GpuLanes* lanes_ = nullptr;  // one GpuLane per OpenMP thread, with --gpu-resize
};

// The GPU can save at most the CPU's resize time, while starting it costs CUDA's start-up and the
// pinned allocations (tenths of a second, more when many ranks share a GPU), and the process's exit
// pays again to release them. So the automatic route starts the GPU only once the resize time it
// could take over, spread over the rank's threads, is at least min_saving seconds. Called before
// each batch file of a rank whose GPU is not started.
void consider_gpu(GpuLanes& lanes, const Worker& worker, uint64_t images_left, int threads, int rank,
                  double min_saving, bool& said) {
  const double per_image = worker.resize_seconds_per_image();
  if (per_image < 0) return;  // nothing resized yet (e.g. every file so far kept from an earlier run)
  const double saving = per_image * double(images_left) / threads;
  if (saving >= min_saving) {
    log_all("rank %d: --gpu-resize: starting the GPU (about %.2f s of resize work left per thread)", rank, saving);
    lanes.start();
  } else if (!said) {
    log_all("rank %d: --gpu-resize: resizing the %llu images left would take about %.2f s per thread, less than "
            "the %.1f s the GPU must save to pay for starting it; the CPU resizes (--gpu-route always overrides)",
            rank, (unsigned long long)images_left, saving, min_saving);
    said = true;
  }
}

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
  // A rank holds two batch files in memory (one being written, one being decoded).
  const double batch_gib = double(opt.per_file) * opt.size * opt.size * opt.channels / double(1ull << 30);
  if (batch_gib > 4.0)
    fail("--per-file " + std::to_string(opt.per_file) + " at --size " + std::to_string(opt.size) + " makes batch files of " +
         std::to_string(int(batch_gib)) + " GiB; each rank holds two in memory, so use a smaller --per-file (at most 4 GiB each)");
  if (opt.threads < 0) fail("--threads must be 0 (automatic) or more");
  if (opt.resize == ResizePolicy::short_side)
    fail("--resize short keeps the aspect ratio and so gives images of different sizes, which batch files "
         "(one image shape each) cannot hold; use --resize crop or squash");
  if (opt.encoding == Encoding::jpeg && (opt.quality < 1 || opt.quality > 100))
    fail("--quality must be between 1 and 100, not " + std::to_string(opt.quality));
  if (opt.limits.max_pixels < 1) fail("--max-pixels must be at least 1");
  if (opt.limits.max_aspect < 1) fail("--max-aspect must be at least 1");
  if (!(opt.gpu_min_saving >= 0)) fail("--gpu-min-saving must be 0 or more seconds");
  if (opt.gpu_resize) gpu_resize_device_for(0);  // refuses a build without CUDA, or no device
  for (const auto& in : opt.inputs) {
    if (::access(in.c_str(), R_OK) != 0) fail_file(in, "input cannot be read: " + errno_text());
  }
  for (const auto* f : {&opt.classes_file, &opt.labels_file})
    if (!f->empty() && ::access(f->c_str(), R_OK) != 0) fail_file(*f, "cannot be read: " + errno_text());
  struct stat st {};
  if (::stat(opt.output.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) fail_file(opt.output, "--output exists and is not a folder");
}

int run_datagen(const RunOptions& opt, const MpiContext& mpi) {
  Stopwatch total;
  validate_run_options(opt);
  const int rank = mpi.rank(), ranks = mpi.size();
  int threads = opt.threads;
  if (threads == 0) threads = std::max(1, int(std::thread::hardware_concurrency()) / std::max(1, mpi.local_size()));
  std::unique_ptr<GpuLanes> lanes;
  if (opt.gpu_resize) {
    GpuResizeOptions o;
    o.device = gpu_resize_device_for(mpi.local_rank());
    o.size = opt.size;
    o.policy = opt.resize;
    o.channels = opt.channels;
    log_all("rank %d: --gpu-resize on CUDA device %d", rank, o.device);
    lanes = std::make_unique<GpuLanes>(o, threads, opt.gpu_always);
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
  for (const auto& in : index.inputs)
    log_info("%s: %s input", in.path.c_str(), in.kind == InputKind::stream ? "compressed (streamed, no random access)" :
                                             in.kind == InputKind::folder ? "folder" : "tar (random access)");
  log_info("index of %zu images in %.2f s (%zu classes, %llu non-image members skipped, %zu refused)",
           index.entries.size(), scan_seconds, index.classes.size(), (unsigned long long)index.skipped,
           index.rejects.size());

  const Plan plan = make_plan(index.entries.size(), opt.per_file, opt.seed);
  const uint64_t files = plan.num_files();
  std::vector<uint64_t> mine_ids, files_per_rank(size_t(ranks), 0);
  for (uint64_t b = 0; b < files; ++b) {
    ++files_per_rank[size_t(plan.owner(b, ranks))];
    if (plan.owner(b, ranks) == rank)
      mine_ids.insert(mine_ids.end(), plan.order.begin() + long(plan.file_begin(b)), plan.order.begin() + long(plan.file_end(b)));
  }
  cv::setNumThreads(1);  // the OpenMP threads are the parallelism; OpenCV must not add its own

  DatasetSums sums(index.classes.size(), {uint32_t(opt.size), uint32_t(opt.size), uint32_t(opt.channels)});
  json mine = {{"files", json::array()}, {"rejects", json::array()}, {"kept", 0}};
  Phases phases;
  try {
    Stopwatch w;
    const SampleSource source(index, mine_ids);
    phases.read += w.seconds();
    if (lanes && opt.gpu_always) lanes->wait_ready();
    Worker worker(opt, index, plan, source, threads, lanes.get());
    Progress progress(mpi, index.entries.size(), files_per_rank);
    std::vector<std::pair<uint64_t, std::string>> rejects;
    // Batch file b is written (and fsync'ed) while the threads decode b + ranks. MPI stays on
    // this thread (MPI_THREAD_FUNNELED), so progress is reported here once a write is done.
    std::future<BatchFileEntry> writing;
    uint64_t writing_b = 0;
    int kept = 0;
    auto collect = [&] {
      Stopwatch wait;
      const BatchFileEntry e = writing.get();
      phases.wait += wait.seconds();
      mine["files"].push_back({writing_b, e.name, e.count, e.bytes, e.crc32c});
      progress.file_done(plan.file_end(writing_b) - plan.file_begin(writing_b));
    };
    uint64_t images_left = mine_ids.size();
    bool said = false;
    for (uint64_t b = uint64_t(rank); b < files; b += uint64_t(ranks)) {
      if (lanes && !lanes->started())
        consider_gpu(*lanes, worker, images_left, threads, rank, opt.gpu_min_saving, said);
      images_left -= plan.file_end(b) - plan.file_begin(b);
      auto made = std::make_shared<Worker::Made>(worker.make(b, rejects));
      kept += made->kept ? 1 : 0;
      if (writing.valid()) collect();
      writing_b = b;
      writing = std::async(std::launch::async, [&worker, &sums, made] { return worker.finish(*made, sums); });
    }
    if (writing.valid()) collect();
    mine["kept"] = kept;
    for (const auto& r : rejects) mine["rejects"].push_back({r.first, r.second});
    phases += worker.phases();
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
    tsv += tsv_field(index.inputs[e.input].path) + "\t" + tsv_field(e.path) + "\t" + tsv_field(why) + "\n";
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
           "write %.2f, wait %.2f",
           sum.read, sum.decode, sum.resize, sum.encode, sum.write, sum.wait);
  if (opt.gpu_resize)
    log_info("GPU phases, seconds summed over threads and ranks: stage %.2f, upload %.2f, kernel %.2f, download %.2f, "
             "wait %.2f; images resized on the GPU %.0f, on the CPU %.0f (rank 0's GPU ready after %.2f s)",
             sum.gpu_stage, sum.gpu_upload, sum.gpu_kernel, sum.gpu_download, sum.gpu_wait, sum.gpu_images,
             sum.cpu_images, lanes ? lanes->ready_seconds() : 0.0);
  for (const auto& in : index.inputs)
    if (!in.complete) std::fprintf(stderr, "datagen: error: incomplete input: %s\n", in.error.c_str());
  if (status) log_info("the dataset holds every member that could be read; the run is incomplete (exit status 2)");
  return status;
}

}  // namespace convoy::datagen
