// The loader benchmark: drains whole epochs as a trainer would (one batch at a time, in order)
// and reports samples per second, stored bytes per second and how long the consumer waited.
#include "input/loader_bench.h"

#include <sys/resource.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cstdio>
#include <thread>
#include <utility>
#include <vector>

#include "input/loaded_file.h"
#include "input/loader.h"
#include "input/loader_sizing.h"
#include "shared/atomic_file.h"
#include "shared/crc32c.h"
#include "shared/dataset_meta.h"
#include "shared/error.h"
#include "shared/timer.h"

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
    if (digest) f.digest = extend(extend(extend(extend(extend(f.digest, b.labels), b.keys), b.pixels), b.flips), b.x);
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

struct TjDecompressor {
  tjhandle h = tjInitDecompress();
  ~TjDecompressor() {
    if (h) tjDestroy(h);
  }
};

// Plain TurboJPEG decodes (tjDecompress2, the whole image, accurate IDCT) of the first samples of
// the dataset, from memory, best of three passes: one core's rate, and the rate of `threads`
// decoders running at once over the same samples, which shared caches, memory bandwidth and
// sibling hyperthreads can hold below threads x one core's. The yardsticks the loader is held to.
struct PlainDecodeRates {
  double one = 0, concurrent = 0;
};

PlainDecodeRates plain_decode_rates(const std::string& dir, const DatasetMeta& meta, size_t max_samples, int threads) {
  std::vector<std::vector<uint8_t>> jpegs;
  LoadedFile f;
  for (size_t k = 0; k < meta.files.size() && jpegs.size() < max_samples; ++k) {
    f.load(join_path(dir, meta.files[k].name), meta.files[k], meta.shape);
    for (size_t i = 0; i < f.count() && jpegs.size() < max_samples; ++i)
      jpegs.emplace_back(f.jpeg_data(i), f.jpeg_data(i) + f.jpeg_size(i));
  }
  const int w = int(meta.shape.width), h = int(meta.shape.height);
  const int pf = meta.shape.channels == 1 ? TJPF_GRAY : TJPF_RGB;
  auto pass = [&] {
    TjDecompressor tj;
    std::vector<uint8_t> out(meta.shape.bytes());
    for (const auto& j : jpegs)
      if (tjDecompress2(tj.h, j.data(), (unsigned long)j.size(), out.data(), w, 0, h, pf, TJFLAG_ACCURATEDCT) != 0)
        fail_file(dir, std::string("TurboJPEG refused a sample: ") + tjGetErrorStr2(tj.h));
  };
  PlainDecodeRates r;
  for (int round = 0; round < 3; ++round) {
    Stopwatch one;
    pass();
    r.one = std::max(r.one, double(jpegs.size()) / one.seconds());
    Stopwatch all;
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back(pass);
    for (auto& t : pool) t.join();
    r.concurrent = std::max(r.concurrent, double(threads) * double(jpegs.size()) / all.seconds());
  }
  return r;
}

// The batch files this rank reads in a training epoch and their bytes, against the dataset's: in
// local order about 1 / ranks of them, in global order all of them (epoch_plan.h).
void print_share(const LoaderBenchOptions& o, const DatasetMeta& meta) {
  const PlanOptions p{o.seed, 1, o.rank, o.ranks, true, o.window_files, o.batch, 0, o.order};
  uint64_t bytes = 0, all = 0;
  for (const BatchFileEntry& f : meta.files) all += f.bytes;
  const std::vector<uint32_t> files = rank_files(meta, p);
  for (uint32_t f : files) bytes += meta.files[f].bytes;
  std::printf("rank %d of %d, %s order: reads %zu of %zu batch files an epoch, %.1f of %.1f MB\n", o.rank, o.ranks,
              order_name(o.order), files.size(), meta.files.size(), double(bytes) / 1e6, double(all) / 1e6);
}

}  // namespace

int run_loader_bench(const LoaderBenchOptions& o) {
  const DatasetMeta meta = read_dataset_meta(o.data);
  require_one_shape(meta, o.data);
  const double sample_mb = double(meta.shape.bytes()) / 1e6;
  std::vector<bool> modes;
  if (o.mode == "raw" || o.mode == "both") modes.push_back(true);
  if (o.mode == "float" || o.mode == "both") modes.push_back(false);
  if (modes.empty()) fail("--mode must be raw, float or both");
  const ReaderChoice readers = choose_readers(o.readers, 0, o.local_ranks);
  std::printf("%s: %llu samples of %ux%ux%u (%s), batch %d, shuffle window %d files; %s\n", o.data.c_str(),
              (unsigned long long)meta.num_samples, meta.shape.height, meta.shape.width, meta.shape.channels,
              encoding_name(meta.encoding), o.batch, o.window_files, readers.why.c_str());
  if (o.train) print_share(o, meta);
  const int cores = usable_cores();
  PlainDecodeRates plain;
  if (meta.encoding == Encoding::jpeg) {
    plain = plain_decode_rates(o.data, meta, 2048, cores);
    std::printf(
        "plain decode: one core's plain TurboJPEG decode of the same JPEGs (whole image, from memory): "
        "%.0f img/s; x %d cores: %.0f img/s; %d such decoders at once: %.0f img/s (%.0f %% of %d x one)\n",
        plain.one, cores, plain.one * cores, cores, plain.concurrent, 100 * plain.concurrent / (plain.one * cores),
        cores);
  }
  for (bool raw : modes) {
    const SampleOutput output = !raw ? SampleOutput::floats : o.mirror ? SampleOutput::mirrored : SampleOutput::raw;
    const LoaderOptions lo = loader_options(o.data, o.batch, o.train, output, o.augment,
                                            DataShare{o.rank, o.ranks, o.seed, o.window_files, o.order},
                                            readers.readers, o.prefetch);
    Loader l(lo, meta);
    std::printf("%s: prefetch window of %d batches\n", raw ? "raw" : "float", l.prefetch());
    std::vector<double> rates, costs;
    const char* name = raw ? "raw" : "float";
    for (int e = 0; e < std::max(1, o.epochs); ++e) {
      const EpochFigures f = drain(l, e, o.digest, o.step_us);
      const double ips = double(f.samples) / f.seconds;
      const double us = 1e6 * f.cpu / double(f.samples);
      std::printf(
          "%s epoch %d: %lld samples in %.3f s (first batch after %.3f s): %.0f img/s, %.0f MB/s, "
          "%.1f CPU us/img\n",
          name, e, f.samples, f.seconds, f.first_batch, ips, ips * sample_mb, us);
      if (o.step_us > 0)
        std::printf(
            "%s epoch %d: consumer waited %.2f %% of the epoch after its first batch (median %.1f us, "
            "99th percentile %.1f us per batch)\n",
            name, e, 100 * f.wait / f.seconds, 1e6 * f.wait_p50, 1e6 * f.wait_p99);
      if (o.digest) std::printf("%s epoch %d: digest %08x\n", name, e, f.digest);
      std::fflush(stdout);
      if (e > 0 || o.epochs == 1) rates.push_back(ips), costs.push_back(us);
    }
    const double m = median(rates), c = median(costs);
    std::printf(
        "%s: median %.0f img/s, %.0f MB/s with %d reader(s) (%.0f img/s per reader); "
        "%.1f CPU us/img (%.0f img/s per busy core)\n",
        name, m, m * sample_mb, lo.readers, m / lo.readers, c, 1e6 / c);
    if (plain.one > 0)
      std::printf(
          "%s: %.2f x one core's plain decode, %.0f %% of %d cores x it, %.0f %% of %d plain decoders at once\n", name,
          m / plain.one, 100 * m / (plain.one * cores), cores, 100 * m / plain.concurrent, cores);
  }
  return 0;
}

}  // namespace convoy
