// libFuzzer target: arbitrary bytes as a datagen input archive, walked the way the index scan walks it
// (nested tars, compressed streams, every member read to its end), then as an index.tsv to parse.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "datagen/archive_walk.h"
#include "datagen/index.h"
#include "shared/error.h"

namespace {

// walk_input opens a file by name (it preads members of uncompressed tars), so the bytes go to an
// in-memory file that /proc names: no disk write and no fsync per run, which would cap the rate
// at a few hundred runs a second.
const std::string& input_path(int& fd) {
  static const std::string path = [&] {
    fd = ::memfd_create("convoy_fuzz_archive", MFD_CLOEXEC);
    if (fd < 0) std::abort();
    return "/proc/self/fd/" + std::to_string(fd);
  }();
  return path;
}

void put(int fd, const uint8_t* data, size_t size) {
  if (::ftruncate(fd, 0) != 0) std::abort();
  size_t done = 0;
  while (done < size) {
    const ssize_t w = ::pwrite(fd, data + done, size - done, off_t(done));
    if (w <= 0) std::abort();
    done += size_t(w);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static int fd = -1;
  const std::string& path = input_path(fd);
  put(fd, data, size);
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
