// The benchmark loads the images into memory first, so that it measures CPU work only; each
// measurement takes the best of several passes to damp noise from other processes, and the passes
// of the different measurements take turns, so that a busy spell on the machine does not fall on
// one of them only.
#include "datagen/decode_bench.h"

#include <turbojpeg.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <vector>

#include "datagen/image_codec.h"
#include "datagen/index.h"
#include "datagen/sample_source.h"
#include "shared/error.h"
#include "shared/libjpeg_decompressor.h"
#include "shared/timer.h"

namespace convoy::datagen {
namespace {

struct Handle {
  tjhandle h = tjInitDecompress();
  ~Handle() {
    if (h) tjDestroy(h);
  }
};

// libjpeg's entropy decoding alone (jpeg_read_coefficients: Huffman or arithmetic decoding into
// DCT coefficients, no IDCT, upsampling or colour conversion). Every decode of the whole JPEG pays
// this much however little it does afterwards, so it bounds what any datagen could reach.
struct CoefficientReader {
  LibjpegDecompressor d{false};
  // False if libjpeg refused the image.
  bool read(const std::vector<uint8_t>& jpeg) {
    jpeg_decompress_struct& info = d.info();
    return d
        .guarded([&] {
          jpeg_mem_src(&info, jpeg.data(), static_cast<unsigned long>(jpeg.size()));
          jpeg_read_header(&info, TRUE);
          jpeg_read_coefficients(&info);
          jpeg_finish_decompress(&info);
        })
        .empty();
  }
};

// One measurement: a pass over all the images, and the best images/s of its passes.
struct Measure {
  std::function<void()> pass;
  double best = 0;
};

void run_interleaved(size_t n, int repeat, std::vector<Measure*> measures) {
  for (int r = 0; r < repeat; ++r)
    for (Measure* m : measures) {
      Stopwatch w;
      m->pass();
      m->best = std::max(m->best, double(n) / std::max(1e-9, w.seconds()));
    }
}

}  // namespace

int bench_decode(const BenchOptions& opt) {
  if (opt.size < 1) fail("--size must be at least 1");
  if (opt.channels != 1 && opt.channels != 3) fail("--channels must be 1 or 3");
  cv::setNumThreads(1);  // one core: OpenCV must not spread a resize over the others
  InputIndex index = scan_inputs({{opt.input}, "", ""});
  if (index.entries.size() > opt.limit) index.entries.resize(opt.limit);
  std::vector<uint64_t> ids(index.entries.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = i;
  SampleSource source(index, ids);
  std::vector<std::vector<uint8_t>> jpegs;
  uint64_t pixels = 0;
  Handle tj;
  for (uint64_t id : ids) {
    std::vector<uint8_t> bytes;
    source.read(id, bytes);
    int w = 0, h = 0, ss = 0, cs = 0;
    if (sniff_format(bytes.data(), bytes.size()) != ImageFormat::jpeg ||
        tjDecompressHeader3(tj.h, bytes.data(), bytes.size(), &w, &h, &ss, &cs) != 0 || cs == TJCS_CMYK ||
        cs == TJCS_YCCK)
      continue;
    pixels += uint64_t(w) * uint64_t(h);
    jpegs.push_back(std::move(bytes));
  }
  if (jpegs.empty()) fail_file(opt.input, "holds no RGB or gray JPEG images to measure");
  const size_t n = jpegs.size();
  std::printf("bench-decode: %zu JPEGs from %s, mean %.0f pixels, output %dx%dx%d (%s), one core\n", n,
              opt.input.c_str(), double(pixels) / double(n), opt.size, opt.size, opt.channels,
              resize_policy_name(opt.resize));

  std::vector<uint8_t> full;
  const int pf = opt.channels == 1 ? TJPF_GRAY : TJPF_RGB;
  Measure floor{[&] {
    for (const auto& j : jpegs) {
      int w = 0, h = 0, ss = 0, cs = 0;
      tjDecompressHeader3(tj.h, j.data(), j.size(), &w, &h, &ss, &cs);
      full.resize(size_t(w) * size_t(h) * size_t(tjPixelSize[pf]));
      tjDecompress2(tj.h, j.data(), j.size(), full.data(), w, 0, h, pf, 0);
    }
  }};
  CoefficientReader coefficients;
  size_t refused = 0;
  Measure entropy{[&] {
    refused = 0;
    for (const auto& j : jpegs) refused += coefficients.read(j) ? 0 : 1;
  }};
  ImageCodec codec;
  DecodeLimits limits;
  std::vector<uint8_t> out(size_t(opt.size) * size_t(opt.size) * size_t(opt.channels));
  auto work = [&](int min_short, bool resize) {
    return Measure{[&, min_short, resize] {
      for (const auto& j : jpegs) {
        try {
          cv::Mat img = codec.decode(j.data(), j.size(), opt.channels, min_short, limits);
          if (resize) resize_to_square(img, opt.size, opt.resize, out.data());
        } catch (const RejectError&) {
        }
      }
    }};
  };
  Measure decode{work(opt.size, false)}, datagen{work(opt.size, true)}, full_size{work(0, true)};
  run_interleaved(n, opt.repeat, {&floor, &entropy, &decode, &datagen, &full_size});
  if (refused) fail_file(opt.input, std::to_string(refused) + " JPEGs that TurboJPEG reads were refused by libjpeg");
  const double decode_only = decode.best, datagen_rate = datagen.best, no_scaling = full_size.best;
  std::printf("  %-44s %10.1f images/s\n", "TurboJPEG decode alone, full size (floor)", floor.best);
  std::printf("  %-44s %10.1f images/s  (%.0f%% of the floor's time)\n",
              "entropy decoding alone (libjpeg coefficients)", entropy.best, 100.0 * floor.best / entropy.best);
  std::printf("  %-44s %10.1f images/s  (%.0f%% of the floor)\n", "datagen decode (DCT scaling), no resize",
              decode_only, 100.0 * decode_only / floor.best);
  std::printf("  %-44s %10.1f images/s  (%.0f%% of the floor)\n", "datagen decode (DCT scaling) + resize", datagen_rate,
              100.0 * datagen_rate / floor.best);
  std::printf("  %-44s %10.1f images/s  (%.0f%% of the floor)\n", "datagen decode (full size) + resize", no_scaling,
              100.0 * no_scaling / floor.best);
  return 0;
}

}  // namespace convoy::datagen
