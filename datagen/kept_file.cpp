// A missing sample is kept missing only if making it now fails again: an earlier run may have
// rejected it for a reason that no longer holds, and then the file is made again with it.
// Statistics count the resized pixels before JPEG encoding, which a JPEG file does not hold: its
// samples are made again for them (read, decode, resize; no encode, no write), so that a resumed
// dataset.json equals an uninterrupted run's.
#include "datagen/kept_file.h"

#include "datagen/dataset_files.h"
#include "datagen/timeline.h"
#include "shared/atomic_file.h"
#include "shared/error.h"
#include "shared/log.h"

namespace convoy::datagen {

std::optional<KeptFile> FileKeeper::check(uint64_t b, const std::vector<uint64_t>& ids, Phases& t) const {
  const std::string path = join_path(opt_.output, batch_file_name(b));
  if (!file_exists(path)) return std::nullopt;
  auto redo = [&](const std::string& why) {
    log_all("%s: made again (%s)", path.c_str(), why.c_str());
    return std::nullopt;
  };
  KeptFile kept{Batch{}, {}, DatasetSums(index_.classes.size(), opt_.shape())};
  Batch& batch = kept.batch;
  try {
    batch = read_batch_file(path);  // verifies every checksum
  } catch (const Error& e) {
    return redo(e.what());
  }
  const uint32_t version = opt_.varied() ? kBatchVersion2 : kBatchVersion;
  if (batch.batch_index != b || !(batch.shape == opt_.shape()) || batch.encoding != opt_.encoding ||
      batch.version != version)
    return redo("made with other options");
  size_t at = 0;
  for (uint64_t id : ids) {
    if (at < batch.count() && uint64_t(batch.ids[at]) == id) {
      if (batch.labels[at] != index_.entries[id].label) return redo("labels differ from the plan");
      ++at;
      continue;
    }
    kept.missing.emplace_back(id, "");
  }
  if (at != batch.count()) return redo("samples differ from the plan");
  Phases untimed;
  std::vector<uint8_t> scratch(opt_.shape().bytes()), enc;
  uint32_t dims[2];
  SlotOut out{scratch.data(), nullptr, opt_.encoding == Encoding::jpeg ? &enc : nullptr};
  if (opt_.varied()) out = SlotOut{nullptr, nullptr, nullptr, dims, &scratch};
  for (auto& m : kept.missing) {
    m.second = samples_.make(m.first, out, untimed);
    if (m.second.empty()) return redo("a sample missing from it can be made now");
  }
  const std::string why = sum_samples(kept, t);
  if (!why.empty()) return redo(why);
  return kept;
}

std::string FileKeeper::sum_samples(KeptFile& kept, Phases& t) const {
  const Batch& batch = kept.batch;
  SampleSums sums(index_.classes.size(), opt_.shape());
  std::vector<uint8_t> made(batch.encoding == Encoding::raw ? 0 : opt_.shape().bytes());
  uint32_t dims[2];
  SlotOut out{made.data(), nullptr, nullptr};
  if (opt_.varied()) out = SlotOut{nullptr, nullptr, nullptr, dims, &made};
  for (size_t i = 0; i < batch.count(); ++i) {
    const uint8_t* pixels = batch.encoding == Encoding::raw ? batch.raw_image(i) : made.data();
    size_t bytes = batch.sample_shape(i).bytes();
    if (batch.encoding != Encoding::raw) {
      const std::string reason = samples_.make(uint64_t(batch.ids[i]), out, t);
      if (!reason.empty()) return "a sample in it cannot be made now: " + reason;
      pixels = made.data();  // it may have grown
      if (opt_.varied()) bytes = size_t(dims[0]) * dims[1] * opt_.channels;
    }
    Laps lap;
    if (opt_.varied())
      sums.add_varied(pixels, bytes, batch.labels[i]);
    else
      sums.add(pixels, batch.labels[i]);
    t.stats += lap(Span::stats);
  }
  kept.sums = sums.totals();
  return "";
}

}  // namespace convoy::datagen
