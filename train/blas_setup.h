// OpenBLAS kernel choice. Debian's OpenBLAS picks its kernels from the CPU model at load time
// and falls back to SSE3 ("Prescott") on CPU models it does not know (common on VMs), which is
// 4-6x slower than the AVX2/AVX-512 kernels the CPU can run.
#pragma once

namespace convoy {

// If OpenBLAS fell back to a generic core and OPENBLAS_CORETYPE is unset, sets it from the CPU
// features and re-executes the program (OpenBLAS reads it only when loaded). Call first in main,
// before MPI_Init; returns normally when nothing needs doing.
void ensure_fast_blas(char** argv);
const char* blas_core_name();

}  // namespace convoy
