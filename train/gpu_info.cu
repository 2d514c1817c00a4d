// CUDA build: counts devices through the runtime; a missing driver means zero devices, not an error.
#include <cuda_runtime.h>

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

}  // namespace convoy
