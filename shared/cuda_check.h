// CUDA runtime calls that fail become one-line convoy::Errors naming the call, file and line (an
// allocation refused for want of memory says how much was asked and is free). The handles' owners
// are in cuda_owners.h.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdio>
#include <string>

#include "shared/error.h"

namespace convoy {

// cudaErrorMemoryAllocation (an instantiated graph's memory, a library's own allocation) is
// OutOfMemory, so that a batch-size sweep ends at that size instead of failing.
[[noreturn]] inline void cuda_fail(cudaError_t e, const char* call, const char* file, int line) {
  const std::string text = std::string("CUDA: ") + call + " failed at " + file + ":" + std::to_string(line) + ": " +
                           cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky, but it must not surface at the next check
    fail_out_of_memory(text);
  }
  fail(text);
}

#define CONVOY_CUDA_CHECK(call)                                                                            \
  do {                                                                                                     \
    const cudaError_t convoy_cuda_err_ = (call);                                                           \
    if (convoy_cuda_err_ != cudaSuccess) ::convoy::cuda_fail(convoy_cuda_err_, #call, __FILE__, __LINE__); \
  } while (0)

// Bytes as MiB for messages.
inline std::string mib_text(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f MiB", double(bytes) / (1 << 20));
  return buf;
}

// "cuda:N (name)" for the current device.
inline std::string current_device_text() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) cudaGetLastError();
  cudaDeviceProp prop;
  std::string s = "cuda:" + std::to_string(dev);
  if (cudaGetDeviceProperties(&prop, dev) == cudaSuccess)
    s += std::string(" (") + prop.name + ")";
  else
    cudaGetLastError();
  return s;
}

// An allocation refused for want of memory (cudaErrorMemoryAllocation): one line saying what was
// asked and, for device memory, how much the device has free.
[[noreturn]] inline void cuda_out_of_memory(size_t bytes, bool device, const char* what) {
  cudaGetLastError();  // not sticky, but it must not surface at the next check
  const std::string asked = std::string(what ? what : "an allocation") + " needs " + mib_text(bytes);
  if (!device) fail_out_of_memory("out of page-locked host memory: " + asked);
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) cudaGetLastError();
  fail_out_of_memory(current_device_text() + ": out of memory: " + asked + ", " + mib_text(free) + " of " +
                     mib_text(total) + " are free");
}

// cudaMalloc / cudaMallocHost with the one-line message above when memory runs out.
#define CONVOY_CUDA_ALLOC(call, bytes, device, what)                                                            \
  do {                                                                                                          \
    const cudaError_t convoy_cuda_err_ = (call);                                                                \
    if (convoy_cuda_err_ == cudaErrorMemoryAllocation) ::convoy::cuda_out_of_memory((bytes), (device), (what)); \
    if (convoy_cuda_err_ != cudaSuccess) ::convoy::cuda_fail(convoy_cuda_err_, #call, __FILE__, __LINE__);      \
  } while (0)

// After a kernel launch: launch-configuration errors surface here, not at the next sync.
#define CONVOY_CUDA_CHECK_LAUNCH() CONVOY_CUDA_CHECK(cudaGetLastError())

}  // namespace convoy
