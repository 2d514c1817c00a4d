// A missing sample is kept missing only if making it now fails again: an earlier run may have
// rejected it for a reason that no longer holds, and then the file is made again with it.
#include "datagen/kept_file.h"

#include "datagen/dataset_files.h"
#include "shared/atomic_file.h"
#include "shared/error.h"
#include "shared/log.h"

namespace convoy::datagen {

std::optional<KeptFile> FileKeeper::check(uint64_t b, const std::vector<uint64_t>& ids) const {
  const std::string path = join_path(opt_.output, batch_file_name(b));
  if (!file_exists(path)) return std::nullopt;
  auto redo = [&](const std::string& why) {
    log_all("%s: made again (%s)", path.c_str(), why.c_str());
    return std::nullopt;
  };
  KeptFile kept;
  Batch& batch = kept.batch;
  try {
    batch = read_batch_file(path);  // verifies every checksum
  } catch (const Error& e) {
    return redo(e.what());
  }
  if (batch.batch_index != b || !(batch.shape == opt_.shape()) || batch.encoding != opt_.encoding)
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
  const SlotOut out{scratch.data(), nullptr, opt_.encoding == Encoding::jpeg ? &enc : nullptr};
  for (auto& m : kept.missing) {
    m.second = samples_.make(m.first, out, untimed);
    if (m.second.empty()) return redo("a sample missing from it can be made now");
  }
  return kept;
}

}  // namespace convoy::datagen
