// The loader benchmark: drains whole epochs as a trainer would (one batch at a time, in order)
// and reports samples per second, stored bytes per second and how long the consumer waited.
#include "train/loader_bench.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "shared/crc32c.h"
#include "shared/dataset_meta.h"
#include "shared/error.h"
#include "shared/timer.h"
#include "train/loader.h"

namespace convoy {
namespace {

struct EpochFigures {
  double seconds = 0, first_batch = 0;
  long long samples = 0;
  uint32_t digest = 0;
};

template <class T>
uint32_t extend(uint32_t crc, const std::vector<T>& v) {
  return crc32c(v.data(), v.size() * sizeof(T), crc);
}

EpochFigures drain(Loader& l, int epoch, bool digest) {
  EpochFigures f;
  Stopwatch clock;
  l.start_epoch(epoch);
  HostBatch b;
  bool first = true;
  while (l.next(b)) {
    if (first) f.first_batch = clock.seconds(), first = false;
    f.samples += b.n;
    if (digest) f.digest = extend(extend(extend(extend(extend(f.digest, b.labels), b.keys), b.crops), b.pixels), b.x);
  }
  f.seconds = clock.seconds();
  return f;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int run_loader_bench(const LoaderBenchOptions& o) {
  const DatasetMeta meta = read_dataset_meta(o.data);
  const double sample_mb = double(meta.shape.bytes()) / 1e6;
  std::vector<bool> modes;
  if (o.mode == "raw" || o.mode == "both") modes.push_back(true);
  if (o.mode == "float" || o.mode == "both") modes.push_back(false);
  if (modes.empty()) fail("--mode must be raw, float or both");
  std::printf("%s: %llu samples of %ux%ux%u (%s), batch %d, %d reader(s), prefetch %d, shuffle window %d files\n",
              o.data.c_str(), (unsigned long long)meta.num_samples, meta.shape.height, meta.shape.width,
              meta.shape.channels, encoding_name(meta.encoding), o.batch, o.readers, o.prefetch, o.window_files);
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
    std::vector<double> rates;
    const char* name = raw ? "raw" : "float";
    for (int e = 0; e < std::max(1, o.epochs); ++e) {
      const EpochFigures f = drain(l, e, o.digest);
      const double ips = double(f.samples) / f.seconds;
      std::printf("%s epoch %d: %lld samples in %.3f s (first batch after %.3f s): %.0f img/s, %.0f MB/s\n", name, e,
                  f.samples, f.seconds, f.first_batch, ips, ips * sample_mb);
      if (o.digest) std::printf("%s epoch %d: digest %08x\n", name, e, f.digest);
      std::fflush(stdout);
      if (e > 0 || o.epochs == 1) rates.push_back(ips);
    }
    const double m = median(rates);
    std::printf("%s: median %.0f img/s, %.0f MB/s with %d reader(s) (%.0f img/s per reader)\n", name, m, m * sample_mb,
                o.readers, m / o.readers);
  }
  return 0;
}

}  // namespace convoy
