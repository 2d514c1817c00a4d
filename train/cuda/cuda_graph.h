// The CUDA backend's step captured once as a CUDA graph and replayed: the owner of an instantiated
// graph (train/gpu_step.cu captures one per batch slot).
#pragma once
#include <cuda_runtime.h>

#include <utility>

#include "shared/cuda_check.h"

namespace convoy {

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

}  // namespace convoy
