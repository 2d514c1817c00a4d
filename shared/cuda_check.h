// CONVOY_CUDA_CHECK for every CUDA runtime call, in datagen's and train's CUDA code: a failure
// throws convoy::Error naming the call, the file and the line.
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "shared/error.h"

#define CONVOY_CUDA_CHECK(call)                                                                 \
  do {                                                                                          \
    cudaError_t convoy_cuda_rc_ = (call);                                                       \
    if (convoy_cuda_rc_ != cudaSuccess)                                                         \
      ::convoy::fail(std::string(#call) + " failed at " + __FILE__ + ":" +                      \
                     std::to_string(__LINE__) + ": " + cudaGetErrorString(convoy_cuda_rc_));    \
  } while (0)

// After a kernel launch: launch-configuration errors surface here, not at the next sync.
#define CONVOY_CUDA_CHECK_LAUNCH() CONVOY_CUDA_CHECK(cudaGetLastError())
