// The check that a path the tools read whole is a regular file: a named pipe blocks its reader until
// a writer comes (forever, for a data folder), and a device may never end.
#pragma once
#include <sys/stat.h>

#include <string>

namespace convoy {

// Throws Error("<path>: not a regular file (a named pipe)") (or a folder, a device, ...) unless
// `st` (stat or fstat of `path`) describes a regular file.
void require_regular_file(const std::string& path, const struct stat& st);

}  // namespace convoy
