// Logging for both tools: printf-style lines on stderr, prefixed with the tool and, under MPI,
// the rank. Most lines come from rank 0 only (log_info); log_all is for every rank.
#pragma once
#include <cstdarg>

namespace convoy {

void log_setup(const char* tool, int rank, int size);
void log_set_quiet(bool quiet);
// Rank 0 only.
void log_info(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// Every rank, prefixed with its number when there are several.
void log_all(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warn(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace convoy
