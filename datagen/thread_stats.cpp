// A JPEG sample counts as the loader will see it, decoded again; without the run's limits, which
// are for the inputs (a --max-pixels below size x size would refuse every sample).
#include "datagen/thread_stats.h"

#include <omp.h>

#include "datagen/image_codec.h"
#include "shared/error.h"

namespace convoy::datagen {

ThreadStats::ThreadStats(const InputIndex& index, const ImageShape& shape, int threads)
    : index_(index), shape_(shape), sums_(size_t(threads)) {}

SampleSums& ThreadStats::mine() {
  auto& s = sums_[size_t(omp_get_thread_num())];
  if (!s) s = std::make_unique<SampleSums>(index_.classes.size(), shape_);
  return *s;
}

void ThreadStats::add(uint64_t id, const uint8_t* raw, const std::vector<uint8_t>* jpeg) {
  const int32_t label = index_.entries[id].label;
  if (raw) return mine().add(raw, label);
  DecodeLimits unlimited;
  const cv::Mat img = thread_codec().decode(jpeg->data(), jpeg->size(), int(shape_.channels), 0, unlimited);
  if (img.total() * img.channels() != shape_.bytes() || !img.isContinuous())
    fail("internal: a re-encoded sample decodes to the wrong size");
  mine().add(img.data, label);
}

void ThreadStats::add(const Batch& batch) {
  for (size_t i = 0; i < batch.count(); ++i) {
    const uint64_t id = uint64_t(batch.ids[i]);
    if (batch.encoding == Encoding::raw) {
      add(id, batch.raw_image(i), nullptr);
    } else {
      const auto begin = batch.images.begin();
      const std::vector<uint8_t> bytes(begin + long(batch.offsets[i]), begin + long(batch.offsets[i + 1]));
      add(id, nullptr, &bytes);
    }
  }
}

void ThreadStats::add_to(DatasetSums& total) {
  for (auto& s : sums_)
    if (s) total.merge(s->totals());
}

}  // namespace convoy::datagen
