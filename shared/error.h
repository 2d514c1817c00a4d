// Errors that reach the user: one line naming the file and the problem. Every tool's main
// catches convoy::Error and prints it; nothing user-facing ends in an abort or a stack trace.
#pragma once
#include <stdexcept>
#include <string>

namespace convoy {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Throws Error(message).
[[noreturn]] void fail(const std::string& message);
// Throws Error("<path>: <problem>").
[[noreturn]] void fail_file(const std::string& path, const std::string& problem);
// strerror(errno) as a string, for messages about system calls.
std::string errno_text();

// Runs body() and turns any exception into "<tool>: error: <message>" on stderr and exit code 1.
int run_main(const char* tool, int (*body)(int, char**), int argc, char** argv);

}  // namespace convoy
