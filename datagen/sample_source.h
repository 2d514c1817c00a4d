// The bytes of indexed samples: one pread for members of uncompressed tars (also inside inner
// tars), a file read for folders, and for compressed inputs the members this rank needs, taken
// from one streaming pass (random access into a compressed stream is impossible).
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "datagen/index.h"

namespace convoy::datagen {

class SampleSource {
 public:
  // needed: the sample ids this rank will read (used only for streamed inputs).
  SampleSource(const InputIndex& index, const std::vector<uint64_t>& needed);
  SampleSource(const SampleSource&) = delete;
  SampleSource& operator=(const SampleSource&) = delete;

  // Thread-safe. Throws convoy::Error when the bytes cannot be read.
  void read(uint64_t id, std::vector<uint8_t>& out) const;

 private:
  const InputIndex& index_;
  std::vector<UniqueFd> fds_;  // per input; not open for folders and streams
  std::unordered_map<uint64_t, std::vector<uint8_t>> streamed_;
};

}  // namespace convoy::datagen
