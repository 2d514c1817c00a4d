// Re-exec with OPENBLAS_CORETYPE set; the exec keeps the process id, so mpirun still tracks it.
// The core is chosen from CPU features only when OpenBLAS fell back to a generic one.
#include "train/blas_setup.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

extern "C" char* openblas_get_corename(void);

namespace convoy {

const char* blas_core_name() { return openblas_get_corename(); }

void ensure_fast_blas(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE")) return;
  const char* core = openblas_get_corename();
  const bool generic = !core || !std::strcmp(core, "Prescott") || !std::strcmp(core, "Core2") ||
                       !std::strcmp(core, "Nehalem") || !std::strcmp(core, "Sandybridge") ||
                       !std::strcmp(core, "Katmai") || !std::strcmp(core, "Unknown");
  if (!generic) return;
  __builtin_cpu_init();
  const char* better = nullptr;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq"))
    better = "SkylakeX";
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    better = "Haswell";
  if (!better) return;
  setenv("OPENBLAS_CORETYPE", better, 1);
  execv("/proc/self/exe", argv);
  // exec failed: carry on with the slower kernels rather than stop.
}

}  // namespace convoy
