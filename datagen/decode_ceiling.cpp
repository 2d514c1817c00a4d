// All decoders start together at a barrier and stop at one deadline, so each one's rate is
// measured while all the others run: their sum is what the cores give decoding at once, with
// nothing else of datagen's (no reading, resizing, statistics or writing); --work adds datagen's
// per-sample work and a write, still with no coordination between the threads.
#include "datagen/decode_ceiling.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "datagen/image_codec.h"
#include "datagen/index.h"
#include "datagen/sample_source.h"
#include "shared/crc32c.h"
#include "shared/error.h"
#include "shared/resize.h"

namespace convoy::datagen {
namespace {

using Clock = std::chrono::steady_clock;

// The RGB or gray JPEGs of the input's first `limit` members, in memory.
std::vector<std::vector<uint8_t>> load_jpegs(const std::string& input, size_t limit) {
  InputIndex index = scan_inputs({{input}, "", ""});
  if (index.entries.size() > limit) index.entries.resize(limit);
  std::vector<uint64_t> ids(index.entries.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = i;
  const SampleSource source(index, ids);
  tjhandle tj = tjInitDecompress();
  std::vector<std::vector<uint8_t>> jpegs;
  for (uint64_t id : ids) {
    std::vector<uint8_t> bytes;
    source.read(id, bytes);
    int w = 0, h = 0, ss = 0, cs = 0;
    if (sniff_format(bytes.data(), bytes.size()) == ImageFormat::jpeg &&
        tjDecompressHeader3(tj, bytes.data(), bytes.size(), &w, &h, &ss, &cs) == 0 && cs != TJCS_CMYK &&
        cs != TJCS_YCCK)
      jpegs.push_back(std::move(bytes));
  }
  tjDestroy(tj);
  if (jpegs.empty()) fail_file(input, "holds no RGB or gray JPEG images to measure");
  return jpegs;
}

// The CPUs this process may run on, in order.
std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

struct Decoder {
  std::vector<const std::vector<uint8_t>*> share;
  uint64_t images = 0;
  double seconds = 0;
};

// One thread's work on one JPEG, as CeilingWork says. A written file is emptied every 256 MB, so
// that its pages are given back and taken anew, as datagen's new batch files take theirs.
class Work {
 public:
  Work(const CeilingOptions& opt, size_t t) : opt_(opt), pf_(opt.channels == 1 ? TJPF_GRAY : TJPF_RGB) {
    sample_.resize(size_t(opt.size) * size_t(opt.size) * size_t(opt.channels));
    if (opt.work != CeilingWork::make_write) return;
    path_ = opt.write_dir + "/ceiling-" + std::to_string(t) + ".bin";
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail_file(path_, std::string("cannot be created: ") + std::strerror(errno));
  }
  ~Work() {
    tjDestroy(tj_);
    if (fd_ >= 0) ::close(fd_), ::unlink(path_.c_str());
  }
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  void operator()(const std::vector<uint8_t>& j) {
    if (opt_.work == CeilingWork::decode) return decode(j);
    make(j);
    if (fd_ >= 0) write_sample();
  }

 private:
  void decode(const std::vector<uint8_t>& j) {
    int w = 0, h = 0, ss = 0, cs = 0;
    tjDecompressHeader3(tj_, j.data(), j.size(), &w, &h, &ss, &cs);
    const tjscalingfactor sf{1, jpeg_scale_denominator(w, h, opt_.size)};
    const int sw = TJSCALED(w, sf), sh = TJSCALED(h, sf);
    out_.resize(size_t(sw) * size_t(sh) * size_t(tjPixelSize[pf_]));
    tjDecompress2(tj_, j.data(), j.size(), out_.data(), sw, 0, sh, pf_, 0);
  }
  void make(const std::vector<uint8_t>& j) {
    try {
      const cv::Mat img = codec_.decode_centre(j.data(), j.size(), opt_.channels, opt_.size, limits_, {});
      resize_to_square(img, opt_.size, ResizePolicy::crop, sample_.data());
      crc_ ^= crc32c(sample_.data(), sample_.size());
    } catch (const RejectError&) {
    }
  }
  void write_sample() {
    if (written_ + sample_.size() > (256ull << 20)) {
      if (::ftruncate(fd_, 0) != 0 || ::lseek(fd_, 0, SEEK_SET) != 0) fail_file(path_, std::strerror(errno));
      written_ = 0;
    }
    if (::write(fd_, sample_.data(), sample_.size()) != ssize_t(sample_.size()))
      fail_file(path_, std::string("write failed: ") + std::strerror(errno));
    written_ += sample_.size();
  }

  const CeilingOptions& opt_;
  const int pf_;
  tjhandle tj_ = tjInitDecompress();
  ImageCodec codec_;
  DecodeLimits limits_;
  std::vector<uint8_t> out_, sample_;
  uint32_t crc_ = 0;
  std::string path_;
  int fd_ = -1;
  uint64_t written_ = 0;
};

// One decoder's loop: its share over and over, from `start` until `stop`.
void decode_until(Decoder& d, const CeilingOptions& opt, size_t t, std::atomic<int>& ready, Clock::time_point& start,
                  const std::atomic<bool>& go, int cpu) {
  if (cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  }
  Work work(opt, t);
  ready.fetch_add(1);
  while (!go.load()) std::this_thread::yield();
  const Clock::time_point stop = start + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(opt.seconds));
  Clock::time_point now = start;
  for (size_t i = 0; now < stop; ++i, now = Clock::now()) {
    work(*d.share[i % d.share.size()]);
    ++d.images;
  }
  d.seconds = std::chrono::duration<double>(now - start).count();
}

const char* work_name(CeilingWork w) {
  switch (w) {
    case CeilingWork::decode: return "decode only at datagen's DCT scale";
    case CeilingWork::make: return "datagen's sample making (centre square at the DCT scale, resize, checksum)";
    case CeilingWork::make_write: return "datagen's sample making and a write of each sample to a file per thread";
  }
  return "";
}

}  // namespace

int decode_ceiling(const CeilingOptions& opt) {
  if (opt.decoders < 1) fail("--concurrent must be at least 1");
  if (!(opt.seconds > 0)) fail("--seconds must be more than 0");
  if (opt.work == CeilingWork::make_write && opt.write_dir.empty()) fail("--work make-write needs --write-dir");
  const std::vector<std::vector<uint8_t>> jpegs = load_jpegs(opt.input, opt.limit);
  std::vector<Decoder> decoders(size_t(opt.decoders));
  for (size_t i = 0; i < jpegs.size(); ++i) decoders[i % decoders.size()].share.push_back(&jpegs[i]);
  for (auto& d : decoders)
    if (d.share.empty()) d.share.push_back(&jpegs[0]);
  const std::vector<int> cpus = allowed_cpus();
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  Clock::time_point start;
  std::vector<std::thread> threads;
  for (size_t t = 0; t < decoders.size(); ++t)
    threads.emplace_back(decode_until, std::ref(decoders[t]), std::cref(opt), t, std::ref(ready), std::ref(start),
                         std::cref(go), cpus.empty() ? -1 : cpus[t % cpus.size()]);
  while (ready.load() < opt.decoders) std::this_thread::yield();
  start = Clock::now();
  go.store(true);
  for (auto& t : threads) t.join();

  std::printf("bench-decode: %d thread%s at once over %zu JPEGs of %s (%zu each), %s, --size %d, %.1f s\n",
              opt.decoders, opt.decoders > 1 ? "s" : "", jpegs.size(), opt.input.c_str(), decoders[0].share.size(),
              work_name(opt.work), opt.size, opt.seconds);
  double sum = 0;
  for (size_t t = 0; t < decoders.size(); ++t) {
    const double rate = double(decoders[t].images) / std::max(1e-9, decoders[t].seconds);
    sum += rate;
    std::printf("  decoder %zu (cpu %d): %.1f images/s\n", t, cpus.empty() ? -1 : cpus[t % cpus.size()], rate);
  }
  std::printf("images/s in all: %.1f (%.1f per decoder)\n", sum, sum / opt.decoders);
  return 0;
}

}  // namespace convoy::datagen
