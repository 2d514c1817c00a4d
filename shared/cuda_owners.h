// RAII owners for the CUDA handles datagen's and train's GPU code hold: a stream, an event, and
// page-locked host or device memory. Their creation fails as cuda_check.h's checks do.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "shared/cuda_check.h"

namespace convoy {

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
