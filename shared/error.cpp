// Error reporting shared by datagen and train: one-line messages, a non-zero exit, no aborts.
#include "shared/error.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace convoy {

void fail(const std::string& message) { throw Error(message); }

void fail_out_of_memory(const std::string& message) { throw OutOfMemory(message); }

void fail_file(const std::string& path, const std::string& problem) { throw Error(path + ": " + problem); }

std::string errno_text() { return std::strerror(errno); }

int run_main(const char* tool, int (*body)(int, char**), int argc, char** argv) {
  try {
    return body(argc, argv);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "%s: error: out of memory\n", tool);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", tool, e.what());
  }
  return 1;
}

}  // namespace convoy
