// Creates and destroys the per-device stream, library handles and workspace, in that order and
// its reverse, so a failure half-way leaves nothing behind.
#include "train/cuda/gpu_context.h"

namespace convoy::gpu {

Context::Context(int device, size_t workspace_bytes, MathMode math)
    : device_(device), workspace_bytes_(workspace_bytes), math_(math) {
  try {
    CONVOY_CUDA_CHECK(cudaSetDevice(device));
    CONVOY_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CONVOY_CUDNN_CHECK(cudnnCreate(&cudnn_));
    CONVOY_CUDNN_CHECK(cudnnSetStream(cudnn_, stream_));
    CONVOY_CUBLAS_CHECK(cublasCreate(&cublas_));
    CONVOY_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    CONVOY_CUBLAS_CHECK(
        cublasSetMathMode(cublas_, math == MathMode::tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    if (workspace_bytes_)
      CONVOY_CUDA_ALLOC(cudaMalloc(&workspace_, workspace_bytes_), workspace_bytes_, true, "the cuDNN workspace");
    // cuBLAS gets its own fixed workspace: it would otherwise allocate one, which a CUDA graph
    // capture forbids.
    CONVOY_CUDA_ALLOC(cudaMalloc(&cublas_workspace_, kCublasWorkspace), kCublasWorkspace, true, "the cuBLAS workspace");
    CONVOY_CUBLAS_CHECK(cublasSetWorkspace(cublas_, cublas_workspace_, kCublasWorkspace));
  } catch (...) {
    release();
    throw;
  }
}

Context::~Context() { release(); }

void Context::release() {
  if (workspace_) cudaFree(workspace_);
  if (cublas_workspace_) cudaFree(cublas_workspace_);
  if (cublas_) cublasDestroy(cublas_);
  if (cudnn_) cudnnDestroy(cudnn_);
  if (stream_) cudaStreamDestroy(stream_);
  workspace_ = nullptr;
  cublas_workspace_ = nullptr;
  cublas_ = nullptr;
  cudnn_ = nullptr;
  stream_ = nullptr;
}

}  // namespace convoy::gpu
