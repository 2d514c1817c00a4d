// libFuzzer target: arbitrary bytes through the batch-file parser (magic, header CRC, sizes, sections).
// A clean convoy::Error is the expected answer to bad bytes; anything else is a finding.
#include <cstddef>
#include <cstdint>

#include "shared/batch_file.h"
#include "shared/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const convoy::Batch b = convoy::decode_batch("fuzz.cvb", data, size);
    // A batch that parses must re-encode to the very bytes it came from.
    const std::vector<uint8_t> again = convoy::encode_batch(b);
    if (again.size() != size || !std::equal(again.begin(), again.end(), data)) __builtin_trap();
  } catch (const convoy::Error&) {
  }
  return 0;
}
