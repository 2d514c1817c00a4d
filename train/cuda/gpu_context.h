// The CUDA backend's base, which every op's CUDA pass and the step build on: the per-device Context
// (one stream, the cuDNN and cuBLAS handles bound to it, one workspace allocated at start: no
// cudaMalloc in the step), typed device buffers placed in one Arena, and checks for cuDNN/cuBLAS calls.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "shared/cuda_owners.h"

// A cuDNN or cuBLAS allocation that failed is OutOfMemory (shared/error.h), as a CUDA one is.
#define CONVOY_CUDNN_CHECK(call)                                                                               \
  do {                                                                                                         \
    cudnnStatus_t convoy_cudnn_rc_ = (call);                                                                   \
    if (convoy_cudnn_rc_ != CUDNN_STATUS_SUCCESS)                                                              \
      ::convoy::gpu::library_fail(#call, __FILE__, __LINE__, cudnnGetErrorString(convoy_cudnn_rc_),            \
                                  convoy_cudnn_rc_ == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED ||  \
                                      convoy_cudnn_rc_ == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED); \
  } while (0)

#define CONVOY_CUBLAS_CHECK(call)                                                                      \
  do {                                                                                                 \
    cublasStatus_t convoy_cublas_rc_ = (call);                                                         \
    if (convoy_cublas_rc_ != CUBLAS_STATUS_SUCCESS)                                                    \
      ::convoy::gpu::library_fail(#call, __FILE__, __LINE__, cublasGetStatusString(convoy_cublas_rc_), \
                                  convoy_cublas_rc_ == CUBLAS_STATUS_ALLOC_FAILED);                    \
  } while (0)

// Grid-stride loop over n elements, for kernels launched with grid_for(n).
#define CONVOY_GRID_STRIDE(i, n) \
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < (n); i += size_t(gridDim.x) * blockDim.x)

namespace convoy::gpu {

// The one line of a failed cuDNN or cuBLAS call; out_of_memory: it could not allocate.
[[noreturn]] inline void library_fail(const char* call, const char* file, int line, const char* status,
                                      bool out_of_memory) {
  const std::string text = std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " + status;
  if (out_of_memory) fail_out_of_memory(text);
  fail(text);
}

// fp32: exact float arithmetic (no tensor cores); tf32: cuDNN/cuBLAS may use TF32 tensor cores;
// bf16: activations and their gradients stored as bf16 in NHWC (what cuDNN's tensor-core kernels
// read), with fp32 accumulation, fp32 master weights, gradients and optimiser state.
enum class MathMode { fp32, tf32, bf16 };
// How cuDNN convolution algorithms are chosen. heuristic: deterministic ones by cuDNN's ranking (the
// same choice on every run, so runs repeat bit for bit); measure: deterministic ones timed once at
// set-up (faster steps; the choice, and so the last bits, can vary between runs); fastest: timed,
// non-deterministic ones allowed (as PyTorch's cudnn.benchmark; no two runs need agree in the last bits).
enum class AlgoSearch { heuristic, measure, fastest };

class Context {
 public:
  explicit Context(int device, size_t workspace_bytes = size_t(256) << 20, MathMode math = MathMode::fp32);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  cudnnHandle_t cudnn() const { return cudnn_; }
  cublasHandle_t cublas() const { return cublas_; }
  void* workspace() const { return workspace_; }
  size_t workspace_bytes() const { return workspace_bytes_; }
  // Device memory the context itself holds: the cuDNN and cuBLAS workspaces.
  size_t workspaces_bytes() const { return workspace_bytes_ + kCublasWorkspace; }
  MathMode math() const { return math_; }
  bool bf16() const { return math_ == MathMode::bf16; }
  AlgoSearch algo_search() const { return algo_search_; }
  void set_algo_search(AlgoSearch a) { algo_search_ = a; }
  void synchronize() const { CONVOY_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

 private:
  void release();
  int device_;
  cudaStream_t stream_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_;
  static constexpr size_t kCublasWorkspace = size_t(32) << 20;
  void* cublas_workspace_ = nullptr;
  MathMode math_;
  AlgoSearch algo_search_ = AlgoSearch::heuristic;
};

// A typed device buffer: its own allocation, or (bound by an Arena) a place in a shared one.
// Either way made at set-up, never in the step.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) : bytes_(count * sizeof(T)), count_(count) {}
  T* get() const { return view_ ? view_ : reinterpret_cast<T*>(bytes_.data()); }
  void bind(T* at, size_t count) {
    view_ = at;
    count_ = count;
  }
  size_t size() const { return count_; }
  void upload(const T* host, size_t count) {
    CONVOY_CUDA_CHECK(cudaMemcpy(get(), host, count * sizeof(T), cudaMemcpyHostToDevice));
  }
  void download(T* host, size_t count) const {
    CONVOY_CUDA_CHECK(cudaMemcpy(host, get(), count * sizeof(T), cudaMemcpyDeviceToHost));
  }

 private:
  convoy::DeviceBuffer bytes_;
  T* view_ = nullptr;
  size_t count_ = 0;
};

// One device allocation for every tensor of a net and its training step: buffers are requested
// first, then commit() makes the single cudaMalloc and binds each buffer to its place in it.
// (cuDNN's and cuBLAS's workspaces stay the Context's own.)
class Arena {
 public:
  template <typename T>
  void request(DeviceBuffer<T>& b, size_t count) {
    if (memory_.data()) ::convoy::fail("Arena: a buffer requested after commit");
    const size_t at = bytes_;
    bytes_ += (count * sizeof(T) + 255) & ~size_t(255);  // 256-byte aligned, as cudaMalloc's own
    binds_.push_back([&b, at, count](unsigned char* base) { b.bind(reinterpret_cast<T*>(base + at), count); });
  }
  void commit() {
    memory_ = convoy::DeviceBuffer(std::max<size_t>(bytes_, 256), "the net's tensors (one arena)");
    for (auto& bind : binds_) bind(memory_.data());
    binds_.clear();
  }
  size_t bytes() const { return bytes_; }

 private:
  size_t bytes_ = 0;
  std::vector<std::function<void(unsigned char*)>> binds_;
  convoy::DeviceBuffer memory_;
};

// Records e on s; while s is being captured, as an event node, so that every replay of the graph
// re-records it and what it times stays timed (outside a capture that flag is refused).
inline void record_event(cudaEvent_t e, cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  CONVOY_CUDA_CHECK(cudaStreamIsCapturing(s, &st));
  if (st == cudaStreamCaptureStatusActive)
    CONVOY_CUDA_CHECK(cudaEventRecordWithFlags(e, s, cudaEventRecordExternal));
  else
    CONVOY_CUDA_CHECK(cudaEventRecord(e, s));
}

// Seconds from `from` to `to`, both complete; 0 where `to` came first.
inline double elapsed_seconds(cudaEvent_t from, cudaEvent_t to) {
  float ms = 0;
  CONVOY_CUDA_CHECK(cudaEventElapsedTime(&ms, from, to));
  return ms > 0 ? ms / 1e3 : 0.0;
}

// Blocks of 256 threads covering n elements, capped so huge tensors use grid-stride loops.
inline unsigned grid_for(size_t n, unsigned block = 256) {
  size_t g = (n + block - 1) / block;
  return static_cast<unsigned>(g < 65535u * 8 ? (g ? g : 1) : 65535u * 8);
}

}  // namespace convoy::gpu
