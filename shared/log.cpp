// One line per call, written with a single fwrite so lines from threads and ranks never interleave.
#include "shared/log.h"

#include <cstdio>
#include <string>

namespace convoy {
namespace {
const char* g_tool = "convoy";
int g_rank = 0, g_size = 1;
bool g_quiet = false;

void emit(const char* tag, const char* fmt, va_list ap) {
  char body[2048];
  std::vsnprintf(body, sizeof body, fmt, ap);
  std::string line = g_tool;
  if (g_size > 1) line += "[" + std::to_string(g_rank) + "]";
  line += ": ";
  line += tag;
  line += body;
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}
}  // namespace

void log_setup(const char* tool, int rank, int size) {
  g_tool = tool;
  g_rank = rank;
  g_size = size;
}

void log_set_quiet(bool quiet) { g_quiet = quiet; }

void log_info(const char* fmt, ...) {
  if (g_rank != 0 || g_quiet) return;
  va_list ap;
  va_start(ap, fmt);
  emit("", fmt, ap);
  va_end(ap);
}

void log_all(const char* fmt, ...) {
  if (g_quiet) return;
  va_list ap;
  va_start(ap, fmt);
  emit("", fmt, ap);
  va_end(ap);
}

void log_warn(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  emit("warning: ", fmt, ap);
  va_end(ap);
}

}  // namespace convoy
