// libFuzzer target: arbitrary bytes as a datagen input archive, walked the way the index scan walks it
// (nested tars, compressed streams, every member read to its end), then as an index.tsv to parse.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "datagen/archive_walk.h"
#include "datagen/index.h"
#include "shared/atomic_file.h"
#include "shared/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // walk_input reads a named file (it preads members of uncompressed tars), so the bytes go to one.
  static const std::string path = "/tmp/convoy_fuzz_archive_" + std::to_string(::getpid()) + ".tar";
  convoy::write_file_atomic(path, std::string(reinterpret_cast<const char*>(data), size));
  std::vector<char> buf(4096);
  try {
    convoy::datagen::walk_input(path, [&](const convoy::datagen::Member& m) {
      if (m.regular)
        while (m.read(buf.data(), buf.size()) > 0) {
        }
      return true;
    });
  } catch (const convoy::Error&) {
  }
  try {
    convoy::datagen::parse_index(std::string(reinterpret_cast<const char*>(data), size), "fuzz/index.tsv");
  } catch (const convoy::Error&) {
  }
  return 0;
}
