// Throughput of the CPU resize (resize_to_square) against --gpu-resize's batched GpuResizer, for
// several thread counts and image shapes, optionally with the JPEG decode in front as datagen does.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <opencv2/core.hpp>

#include "datagen/gpu_resize.h"
#include "datagen/image_codec.h"
#include "shared/error.h"
#include "shared/resize.h"
#include "shared/timer.h"
#include "train/gpu_info.h"

namespace {

using namespace convoy;
using namespace convoy::datagen;

struct Config {
  int size = 256;
  std::string policy = "crop";
  int channels = 3;
  int images = 512;
  std::vector<int> threads = {1, 4, 8, 16};
  std::vector<std::string> shapes = {"2500x1900", "500x375"};
  bool decode = false;
  int device = 0;
  int batch = 32;
};

cv::Mat make_image(int w, int h, int c, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> noise(-12, 12);
  cv::Mat m(h, w, c == 1 ? CV_8UC1 : CV_8UC3);
  for (int y = 0; y < h; ++y) {
    uint8_t* row = m.ptr<uint8_t>(y);
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < c; ++k)
        row[x * c + k] = uint8_t(std::clamp((x / 3 + y / 5 + k * 70) % 256 + noise(rng), 0, 255));
  }
  return m;
}

// The inputs one thread cycles through: raw images, or their JPEG encodings when decoding too.
struct Inputs {
  std::vector<cv::Mat> raw;
  std::vector<std::vector<uint8_t>> jpeg;
};

Inputs make_inputs(int w, int h, const Config& cfg) {
  Inputs in;
  ImageCodec codec;
  for (unsigned i = 0; i < 4; ++i) {
    cv::Mat m = make_image(w, h, cfg.channels, i);
    if (cfg.decode) {
      in.jpeg.emplace_back();
      codec.encode_jpeg(m.data, w, h, cfg.channels, 90, in.jpeg.back());
    } else {
      in.raw.push_back(m);
    }
  }
  return in;
}

cv::Mat next_image(const Inputs& in, ImageCodec& codec, int i, const Config& cfg) {
  if (in.jpeg.empty()) return in.raw[i % in.raw.size()];
  const auto& j = in.jpeg[i % in.jpeg.size()];
  return codec.decode(j.data(), j.size(), cfg.channels, cfg.size, DecodeLimits{});
}

// Runs body(thread, first, count) on T threads splitting cfg.images; returns wall seconds.
template <class F>
double run_threads(int threads, int images, F body) {
  Stopwatch sw;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    const int first = images * t / threads, last = images * (t + 1) / threads;
    pool.emplace_back(body, t, first, last - first);
  }
  for (auto& th : pool) th.join();
  return sw.seconds();
}

double bench_cpu(const Inputs& in, int threads, const Config& cfg) {
  const ResizePolicy policy = parse_resize_policy(cfg.policy);
  return run_threads(threads, cfg.images, [&](int, int first, int count) {
    ImageCodec codec;
    std::vector<uint8_t> sample(size_t(cfg.size) * cfg.size * cfg.channels);
    for (int i = first; i < first + count; ++i)
      resize_to_square(next_image(in, codec, i, cfg), cfg.size, policy, sample.data());
  });
}

// Each thread alternates two resizers, so it decodes batch n+1 while batch n is on the GPU.
double bench_gpu(const Inputs& in, int threads, const Config& cfg, GpuResizeTimes& total) {
  std::vector<GpuResizeTimes> per(threads);
  GpuResizeOptions o;
  o.device = cfg.device;
  o.size = cfg.size;
  o.policy = parse_resize_policy(cfg.policy);
  o.channels = cfg.channels;
  o.max_images = cfg.batch;
  const size_t per_image = in.raw.empty() ? size_t(2) << 20 : in.raw[0].total() * cfg.channels;
  o.staging_bytes = std::min(size_t(cfg.batch) * per_image, size_t(64) << 20);
  // Allocation (pinned memory, streams) happens once per worker in datagen, so it stays out of the time.
  std::vector<std::unique_ptr<GpuResizer>> pairs;
  for (int t = 0; t < 2 * threads; ++t) pairs.push_back(std::make_unique<GpuResizer>(o));
  const double s = run_threads(threads, cfg.images, [&](int t, int first, int count) {
    ImageCodec codec;
    GpuResizer* r[2] = {pairs[2 * t].get(), pairs[2 * t + 1].get()};
    std::vector<uint8_t> sample(size_t(cfg.size) * cfg.size * cfg.channels);
    int cur = 0;
    auto drain = [&](GpuResizer* g) {
      g->wait();
      for (int k = 0; k < g->count(); ++k) std::copy_n(g->output(k), sample.size(), sample.data());
    };
    for (int i = first; i < first + count; ++i) {
      cv::Mat m = next_image(in, codec, i, cfg);
      if (!r[cur]->add(m.data, m.step, m.cols, m.rows)) {
        r[cur]->submit();
        cur ^= 1;
        drain(r[cur]);
        if (!r[cur]->add(m.data, m.step, m.cols, m.rows)) fail("bench: an empty resizer refused an image");
      }
    }
    r[cur]->submit();
    drain(r[cur ^ 1]);
    drain(r[cur]);
  });
  for (auto& p : pairs) total += p->times();
  return s;
}

int body(int argc, char** argv) {
  Config cfg;
  CLI::App app("gpu_resize_bench: CPU resize vs --gpu-resize throughput");
  app.add_option("--size", cfg.size, "sample side S");
  app.add_option("--resize", cfg.policy, "crop or squash");
  app.add_option("--channels", cfg.channels, "1 or 3");
  app.add_option("--images", cfg.images, "images per measurement");
  app.add_option("--threads", cfg.threads, "thread counts to measure")->delimiter(',');
  app.add_option("--shape", cfg.shapes, "WxH source shapes")->delimiter(',');
  app.add_flag("--decode", cfg.decode, "decode a JPEG before each resize, as datagen does");
  app.add_option("--device", cfg.device, "CUDA device");
  app.add_option("--batch", cfg.batch, "images per GPU batch");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  std::printf("# %s, %u CPU threads; S=%d %s C=%d images=%d batch=%d decode=%s\n", gpu_name(cfg.device).c_str(),
              std::thread::hardware_concurrency(), cfg.size, cfg.policy.c_str(), cfg.channels, cfg.images, cfg.batch,
              cfg.decode ? "jpeg" : "no");
  std::printf("%-10s %7s %12s %12s %7s %9s %9s %9s %9s %9s\n", "shape", "threads", "cpu img/s", "gpu img/s", "speedup",
              "stage ms", "up ms", "kern ms", "down ms", "wait ms");
  const bool have_gpu = gpu_resize_device_count() > cfg.device;
  for (const std::string& shape : cfg.shapes) {
    int w = 0, h = 0;
    if (std::sscanf(shape.c_str(), "%dx%d", &w, &h) != 2 || w <= 0 || h <= 0)
      fail("--shape must look like 2500x1900, not '" + shape + "'");
    const Inputs in = make_inputs(w, h, cfg);
    for (int t : cfg.threads) {
      const double cpu = bench_cpu(in, t, cfg);
      if (!have_gpu) {
        std::printf("%-10s %7d %12.1f %12s\n", shape.c_str(), t, cfg.images / cpu, "no GPU");
        continue;
      }
      GpuResizeTimes g;
      const double gpu = bench_gpu(in, t, cfg, g);
      std::printf("%-10s %7d %12.1f %12.1f %7.2f %9.1f %9.1f %9.1f %9.1f %9.1f\n", shape.c_str(), t, cfg.images / cpu,
                  cfg.images / gpu, cpu / gpu, g.stage_s * 1e3, g.upload_s * 1e3, g.kernel_s * 1e3, g.download_s * 1e3,
                  g.wait_s * 1e3);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return convoy::run_main("gpu_resize_bench", body, argc, argv); }
