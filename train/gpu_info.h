// Which GPUs this process can use. Without the CUDA build (or without a driver) there are none,
// and train falls back to the CPU backend.
#pragma once
#include <string>

namespace convoy {

int gpu_count();  // 0 when there is no CUDA build, no driver or no device
std::string gpu_name(int device);

}  // namespace convoy
