// Which GPUs this process can use. Without the CUDA build (or without a driver) there are none,
// and train falls back to the CPU backend.
#pragma once
#include <string>

namespace convoy {

int gpu_count();  // 0 when there is no CUDA build, no driver or no device
std::string gpu_name(int device);
// The driver's and libraries' versions this process runs with ("driver 13.0, runtime 13.0, cuDNN
// 9.19.0, cuBLAS 13.1.0, NCCL 2.28.9"), which differ between hosts and explain speeds that do; ""
// without the CUDA build.
std::string gpu_libraries();

}  // namespace convoy
