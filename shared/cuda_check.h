// CUDA runtime calls that fail become one-line convoy::Errors naming the call, file and line; and
// RAII owners for the handles datagen's and train's GPU code hold (stream, event, pinned and device memory).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdio>
#include <string>
#include <utility>

#include "shared/error.h"

namespace convoy {

[[noreturn]] inline void cuda_fail(cudaError_t e, const char* call, const char* file, int line) {
  fail(std::string("CUDA: ") + call + " failed at " + file + ":" + std::to_string(line) + ": " + cudaGetErrorName(e) +
       " (" + cudaGetErrorString(e) + ")");
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
  if (!device) fail("out of page-locked host memory: " + asked);
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) cudaGetLastError();
  fail(current_device_text() + ": out of memory: " + asked + ", " + mib_text(free) + " of " + mib_text(total) +
       " are free");
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

// Destructors cannot throw, and a failing free during unwinding must not hide the first error, so
// release errors are dropped (and cleared from the runtime's last-error slot).
class CudaStream {
 public:
  CudaStream() { CONVOY_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  // A stream whose kernels the GPU schedules first (cudaDeviceGetStreamPriorityRange's greatest).
  struct Urgent {};
  explicit CudaStream(Urgent) {
    int least = 0, greatest = 0;
    CONVOY_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    CONVOY_CUDA_CHECK(cudaStreamCreateWithPriority(&s_, cudaStreamNonBlocking, greatest));
  }
  ~CudaStream() {
    if (s_ && cudaStreamDestroy(s_) != cudaSuccess) cudaGetLastError();
  }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

class CudaEvent {
 public:
  CudaEvent() { CONVOY_CUDA_CHECK(cudaEventCreate(&e_)); }
  ~CudaEvent() {
    if (e_ && cudaEventDestroy(e_) != cudaSuccess) cudaGetLastError();
  }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

// An instantiated CUDA graph, replayed with launch().
class CudaGraphExec {
 public:
  CudaGraphExec() = default;
  // Ends the capture running on `s` and instantiates what it recorded. Kernels keep the priority of
  // the stream they were captured on (an urgent stream's stay urgent), not the launching stream's.
  static CudaGraphExec end_capture(cudaStream_t s) {
    cudaGraph_t g = nullptr;
    CONVOY_CUDA_CHECK(cudaStreamEndCapture(s, &g));
    CudaGraphExec e;
    const cudaError_t rc = cudaGraphInstantiate(&e.exec_, g, cudaGraphInstantiateFlagUseNodePriority);
    cudaGraphDestroy(g);
    CONVOY_CUDA_CHECK(rc);
    return e;
  }
  ~CudaGraphExec() { release(); }
  CudaGraphExec(CudaGraphExec&& o) noexcept : exec_(std::exchange(o.exec_, nullptr)) {}
  CudaGraphExec& operator=(CudaGraphExec&& o) noexcept {
    if (this != &o) {
      release();
      exec_ = std::exchange(o.exec_, nullptr);
    }
    return *this;
  }
  explicit operator bool() const { return exec_ != nullptr; }
  void launch(cudaStream_t s) const { CONVOY_CUDA_CHECK(cudaGraphLaunch(exec_, s)); }

 private:
  void release() {
    if (exec_ && cudaGraphExecDestroy(exec_) != cudaSuccess) cudaGetLastError();
    exec_ = nullptr;
  }
  cudaGraphExec_t exec_ = nullptr;
};

// Memory from one CUDA allocator, owned for its lifetime: page-locked host memory (so that
// cudaMemcpyAsync really is asynchronous) or device memory. `what` names it in the message when
// memory runs out.
template <cudaError_t (*Alloc)(void**, size_t), cudaError_t (*Free)(void*), bool kDevice>
class CudaMemory {
 public:
  CudaMemory() = default;
  explicit CudaMemory(size_t bytes, const char* what = nullptr) : n_(bytes) {
    if (bytes) CONVOY_CUDA_ALLOC(Alloc(&p_, bytes), bytes, kDevice, what);
  }
  ~CudaMemory() { release(); }
  CudaMemory(CudaMemory&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  CudaMemory& operator=(CudaMemory&& o) noexcept {
    if (this != &o) {
      release();
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  unsigned char* data() const { return static_cast<unsigned char*>(p_); }
  size_t size() const { return n_; }

 private:
  void release() {
    if (p_ && Free(p_) != cudaSuccess) cudaGetLastError();
    p_ = nullptr;
    n_ = 0;
  }
  void* p_ = nullptr;
  size_t n_ = 0;
};

using PinnedBuffer = CudaMemory<::cudaMallocHost, ::cudaFreeHost, false>;
using DeviceBuffer = CudaMemory<::cudaMalloc, ::cudaFree, true>;

}  // namespace convoy
