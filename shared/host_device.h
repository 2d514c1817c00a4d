// CONVOY_HD: a function the CPU path and a CUDA kernel both call, so that both compute alike (the
// resize's arithmetic, the counter RNG, the int4 wire's rounding); plain inline without nvcc.
#pragma once

#if defined(__CUDACC__)
#define CONVOY_HD __host__ __device__ __forceinline__
#else
#define CONVOY_HD inline
#endif
