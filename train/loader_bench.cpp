// The loader benchmark: drains whole epochs as a trainer would (one batch at a time, in order)
// and reports samples per second, stored bytes per second and how long the consumer waited.
#include "train/loader_bench.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

#include "shared/crc32c.h"
#include "shared/dataset_meta.h"
#include "shared/error.h"
#include "shared/timer.h"
#include "train/loader.h"

namespace convoy {
namespace {

// User and system CPU seconds of the whole process: on a shared machine the cost per sample is
// steadier than the wall-clock rate.
double cpu_seconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

struct EpochFigures {
  double seconds = 0, first_batch = 0, cpu = 0;
  double wait = 0, wait_p50 = 0, wait_p99 = 0;  // seconds the consumer spent in next(), after the first batch
  long long samples = 0;
  uint32_t digest = 0;
};

template <class T>
uint32_t extend(uint32_t crc, const std::vector<T>& v) {
  return crc32c(v.data(), v.size() * sizeof(T), crc);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double percentile_99(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(0.99 * double(v.size())))];
}

EpochFigures drain(Loader& l, int epoch, bool digest, double step_us) {
  EpochFigures f;
  Stopwatch clock, lap;
  const double cpu0 = cpu_seconds();
  l.start_epoch(epoch);
  HostBatch b;
  bool first = true;
  std::vector<double> waits;
  for (;;) {
    lap.reset();
    if (!l.next(b)) break;
    const double w = lap.seconds();
    if (first) {
      f.first_batch = clock.seconds(), first = false;
    } else {
      waits.push_back(w);
    }
    f.samples += b.n;
    if (digest) f.digest = extend(extend(extend(extend(extend(f.digest, b.labels), b.keys), b.crops), b.pixels), b.x);
    for (lap.reset(); lap.seconds() * 1e6 < step_us;) {
    }
  }
  f.seconds = clock.seconds();
  f.cpu = cpu_seconds() - cpu0;
  for (double w : waits) f.wait += w;
  f.wait_p50 = median(waits);
  f.wait_p99 = percentile_99(std::move(waits));
  return f;
}

}  // namespace

int run_loader_bench(const LoaderBenchOptions& o) {
  const DatasetMeta meta = read_dataset_meta(o.data);
  const double sample_mb = double(meta.shape.bytes()) / 1e6;
  std::vector<bool> modes;
  if (o.mode == "raw" || o.mode == "both") modes.push_back(true);
  if (o.mode == "float" || o.mode == "both") modes.push_back(false);
  if (modes.empty()) fail("--mode must be raw, float or both");
  std::printf("%s: %llu samples of %ux%ux%u (%s), batch %d, %d reader(s), shuffle window %d files\n",
              o.data.c_str(), (unsigned long long)meta.num_samples, meta.shape.height, meta.shape.width,
              meta.shape.channels, encoding_name(meta.encoding), o.batch, o.readers, o.window_files);
  for (bool raw : modes) {
    LoaderOptions lo;
    lo.dir = o.data;
    lo.local_batch = o.batch;
    lo.readers = o.readers;
    lo.prefetch = o.prefetch;
    lo.window_files = o.window_files;
    lo.seed = o.seed;
    lo.raw = raw;
    lo.augment.crop = o.crop;
    lo.augment.pad = o.pad;
    lo.augment.flip = o.flip;
    Loader l(lo, meta);
    std::printf("%s: prefetch window of %d batches\n", raw ? "raw" : "float", l.prefetch());
    std::vector<double> rates, costs;
    const char* name = raw ? "raw" : "float";
    for (int e = 0; e < std::max(1, o.epochs); ++e) {
      const EpochFigures f = drain(l, e, o.digest, o.step_us);
      const double ips = double(f.samples) / f.seconds;
      const double us = 1e6 * f.cpu / double(f.samples);
      std::printf("%s epoch %d: %lld samples in %.3f s (first batch after %.3f s): %.0f img/s, %.0f MB/s, "
                  "%.1f CPU us/img\n",
                  name, e, f.samples, f.seconds, f.first_batch, ips, ips * sample_mb, us);
      if (o.step_us > 0)
        std::printf("%s epoch %d: consumer waited %.2f %% of the epoch after its first batch (median %.1f us, "
                    "99th percentile %.1f us per batch)\n",
                    name, e, 100 * f.wait / f.seconds, 1e6 * f.wait_p50, 1e6 * f.wait_p99);
      if (o.digest) std::printf("%s epoch %d: digest %08x\n", name, e, f.digest);
      std::fflush(stdout);
      if (e > 0 || o.epochs == 1) rates.push_back(ips), costs.push_back(us);
    }
    const double m = median(rates), c = median(costs);
    std::printf("%s: median %.0f img/s, %.0f MB/s with %d reader(s) (%.0f img/s per reader); "
                "%.1f CPU us/img (%.0f img/s per busy core)\n",
                name, m, m * sample_mb, o.readers, m / o.readers, c, 1e6 / c);
  }
  return 0;
}

}  // namespace convoy
