// CPU-only build: no GPUs. The CUDA build uses gpu_info.cu instead.
#include "train/gpu_info.h"

#ifndef CONVOY_HAVE_CUDA
namespace convoy {
int gpu_count() { return 0; }
std::string gpu_name(int) { return ""; }
std::string gpu_libraries() { return ""; }
}  // namespace convoy
#endif
