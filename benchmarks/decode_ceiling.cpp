// All decoders start together at a barrier and stop at one deadline, so each one's rate is
// measured while all the others run: their sum is what the cores give decoding at once, with
// nothing else of datagen's (no reading, resizing, statistics or writing).
#include "benchmarks/decode_ceiling.h"

#include <pthread.h>
#include <sched.h>
#include <turbojpeg.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "datagen/image_codec.h"
#include "datagen/index.h"
#include "datagen/sample_source.h"
#include "shared/error.h"

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

// One decoder's loop: its share over and over, from `start` until `stop`.
void decode_until(Decoder& d, const CeilingOptions& opt, std::atomic<int>& ready, Clock::time_point& start,
                  const std::atomic<bool>& go, int cpu) {
  if (cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  }
  tjhandle tj = tjInitDecompress();
  const int pf = opt.channels == 1 ? TJPF_GRAY : TJPF_RGB;
  std::vector<uint8_t> out;
  ready.fetch_add(1);
  while (!go.load()) std::this_thread::yield();
  const Clock::time_point stop = start + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(opt.seconds));
  Clock::time_point now = start;
  for (size_t i = 0; now < stop; ++i, now = Clock::now()) {
    const std::vector<uint8_t>& j = *d.share[i % d.share.size()];
    int w = 0, h = 0, ss = 0, cs = 0;
    tjDecompressHeader3(tj, j.data(), j.size(), &w, &h, &ss, &cs);
    const tjscalingfactor sf{1, jpeg_scale_denominator(w, h, opt.size)};
    const int sw = TJSCALED(w, sf), sh = TJSCALED(h, sf);
    out.resize(size_t(sw) * size_t(sh) * size_t(tjPixelSize[pf]));
    tjDecompress2(tj, j.data(), j.size(), out.data(), sw, 0, sh, pf, 0);
    ++d.images;
  }
  d.seconds = std::chrono::duration<double>(now - start).count();
  tjDestroy(tj);
}

}  // namespace

int decode_ceiling(const CeilingOptions& opt) {
  if (opt.decoders < 1) fail("--concurrent must be at least 1");
  if (!(opt.seconds > 0)) fail("--seconds must be more than 0");
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
    threads.emplace_back(decode_until, std::ref(decoders[t]), std::cref(opt), std::ref(ready), std::ref(start),
                         std::cref(go), cpus.empty() ? -1 : cpus[t % cpus.size()]);
  while (ready.load() < opt.decoders) std::this_thread::yield();
  start = Clock::now();
  go.store(true);
  for (auto& t : threads) t.join();

  std::printf(
      "bench-decode: %d TurboJPEG decoder%s at once over %zu JPEGs of %s (%zu each), decode only at "
      "datagen's DCT scale for --size %d, %.1f s\n",
      opt.decoders, opt.decoders > 1 ? "s" : "", jpegs.size(), opt.input.c_str(), decoders[0].share.size(), opt.size,
      opt.seconds);
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
