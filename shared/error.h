// Errors that reach the user: one line naming the file and the problem. Every tool's main
// catches convoy::Error and prints it; nothing user-facing ends in an abort or a stack trace.
#pragma once
#include <stdexcept>
#include <string>

namespace convoy {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Memory refused (a device allocation, cuDNN's or cuBLAS's, a step larger than the memory free): an
// Error like any other, but one that a batch-size sweep takes for "this size does not fit".
struct OutOfMemory : Error {
  using Error::Error;
};
// OutOfMemory that every rank of a job threw at the same point, having agreed on it (a step too
// large on any rank's GPU): none is left waiting in a collective call, so a sweep can go on.
struct OutOfMemoryOnEveryRank : OutOfMemory {
  using OutOfMemory::OutOfMemory;
};
// A batch that makes a tensor larger than cuDNN describes (2^31 - 1 values): every rank finds so
// from the net alone, before any library is called, so a sweep takes it as the end like memory.
struct TensorTooLarge : OutOfMemoryOnEveryRank {
  using OutOfMemoryOnEveryRank::OutOfMemoryOnEveryRank;
};

// Throws Error(message).
[[noreturn]] void fail(const std::string& message);
// Throws OutOfMemory(message).
[[noreturn]] void fail_out_of_memory(const std::string& message);
// Throws Error("<path>: <problem>").
[[noreturn]] void fail_file(const std::string& path, const std::string& problem);
// strerror(errno) as a string, for messages about system calls.
std::string errno_text();

// Runs body() and turns any exception into "<tool>: error: <message>" on stderr and exit code 1.
int run_main(const char* tool, int (*body)(int, char**), int argc, char** argv);

}  // namespace convoy
