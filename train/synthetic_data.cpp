// Synthetic dataset writer; JPEG files are encoded with TurboJPEG at quality 95. Pixels come from
// the counter hash, so the same spec always gives the same bytes.
#include "train/synthetic_data.h"

#include <turbojpeg.h>

#include <cmath>
#include <cstdio>

#include "shared/atomic_file.h"
#include "shared/counter_rng.h"
#include "shared/dataset_meta.h"
#include "shared/error.h"

namespace convoy {
namespace {
struct TjCompressor {
  tjhandle h = tjInitCompress();
  ~TjCompressor() {
    if (h) tjDestroy(h);
  }
};
}  // namespace

void write_synthetic_dataset(const std::string& dir, const SyntheticSpec& spec) {
  make_dirs(dir);
  const ImageShape s = spec.shape;
  if (s.channels != 1 && s.channels != 3) fail("synthetic data: channels must be 1 or 3");
  DatasetMeta meta;
  for (int c = 0; c < spec.classes; ++c) meta.classes.push_back("class" + std::to_string(c));
  meta.class_counts.assign(spec.classes, 0);
  meta.shape = s;
  meta.encoding = spec.encoding;
  meta.per_file = spec.file_counts.empty() ? 0 : spec.file_counts[0];
  double sum = 0, sq = 0, px = 0;
  TjCompressor tj;
  int64_t id = 0;
  for (size_t f = 0; f < spec.file_counts.size(); ++f) {
    Batch b;
    b.shape = s;
    b.encoding = spec.encoding;
    b.batch_index = uint32_t(f);
    std::vector<uint8_t> img(s.bytes());
    for (uint32_t i = 0; i < spec.file_counts[f]; ++i, ++id) {
      const int label = int(counter_uniform(spec.seed, uint64_t(id), 0) * float(spec.classes)) % spec.classes;
      const uint32_t bh = std::max(1u, s.height / 3), bw = std::max(1u, s.width / 3);
      const uint32_t top = (uint32_t(label) * 7 % 3) * (s.height - bh) / 2;
      const uint32_t left = (uint32_t(label) % 3) * (s.width - bw) / 2;
      for (uint32_t y = 0; y < s.height; ++y)
        for (uint32_t x = 0; x < s.width; ++x)
          for (uint32_t c = 0; c < s.channels; ++c) {
            const bool in_block = y >= top && y < top + bh && x >= left && x < left + bw;
            const float noise = counter_uniform(spec.seed, uint64_t(id), 1 + (y * s.width + x) * s.channels + c);
            const uint8_t v = uint8_t(in_block ? 160 + noise * 90 : noise * 100);
            img[(size_t(y) * s.width + x) * s.channels + c] = v;
            sum += v;
            sq += double(v) * v;
            px += 1;
          }
      b.labels.push_back(label);
      b.ids.push_back(id);
      meta.class_counts[label]++;
      if (spec.encoding == Encoding::raw) {
        b.images.insert(b.images.end(), img.begin(), img.end());
        continue;
      }
      if (b.offsets.empty()) b.offsets.push_back(0);
      unsigned char* jpeg = nullptr;
      unsigned long size = 0;
      if (tjCompress2(tj.h, img.data(), int(s.width), 0, int(s.height), s.channels == 1 ? TJPF_GRAY : TJPF_RGB, &jpeg,
                      &size, s.channels == 1 ? TJSAMP_GRAY : TJSAMP_444, 95, 0) != 0)
        fail(std::string("synthetic data: JPEG encoding failed: ") + tjGetErrorStr2(tj.h));
      b.images.insert(b.images.end(), jpeg, jpeg + size);
      tjFree(jpeg);
      b.offsets.push_back(b.images.size());
    }
    const std::string name = batch_file_name(f);
    BatchFileEntry e;
    e.name = name;
    e.count = uint32_t(b.count());
    e.crc32c = write_batch_file(join_path(dir, name), b);
    e.bytes = encode_batch(b).size();
    meta.files.push_back(e);
    meta.num_samples += e.count;
  }
  const double mean = px > 0 ? sum / px : 0;
  meta.mean.assign(s.channels, mean);
  meta.std.assign(s.channels, px > 0 ? std::sqrt(std::max(1e-6, sq / px - mean * mean)) : 1.0);
  meta.made_by = {{"tool", "train synth"}, {"seed", spec.seed}};
  write_dataset_meta(dir, meta);
}

}  // namespace convoy
