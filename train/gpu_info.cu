// CUDA build: counts devices through the runtime; a missing driver means zero devices, not an error.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

#include <string>

#include "train/gpu_info.h"

namespace convoy {

int gpu_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

std::string gpu_name(int device) {
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return "";
  return prop.name;
}

namespace {

// "13.0" from CUDA's 13000; "none" where the call failed or there is no driver.
std::string cuda_version_text(cudaError_t err, int v) {
  if (err != cudaSuccess) cudaGetLastError();
  if (err != cudaSuccess || v <= 0) return "none";
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

// "9.19.0" from cuDNN 9's 91900 and NCCL's 22809 alike (major x 10000 + minor x 100 + patch).
std::string dotted(long long v) {
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

}  // namespace

std::string gpu_libraries() {
  int driver = 0, runtime = 0, nccl = 0, major = 0, minor = 0, patch = 0;
  // Each call is made before its value is read: a function's arguments are evaluated in no set
  // order, so passing both the call and the value it writes to one function may read it unset.
  const cudaError_t driver_err = cudaDriverGetVersion(&driver);
  const cudaError_t runtime_err = cudaRuntimeGetVersion(&runtime);
  std::string s = "driver " + cuda_version_text(driver_err, driver);
  s += ", runtime " + cuda_version_text(runtime_err, runtime);
  s += ", cuDNN " + dotted(static_cast<long long>(cudnnGetVersion()));
  if (cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS)
    s += ", cuBLAS " + std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
  if (ncclGetVersion(&nccl) == ncclSuccess) s += ", NCCL " + dotted(nccl);
  return s;
}

}  // namespace convoy
