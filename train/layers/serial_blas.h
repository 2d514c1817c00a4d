// OpenBLAS on its caller's thread for the scope of a CPU layer's sgemm calls, whatever the process
// had set: the layers spread their work over OpenMP threads themselves.
#pragma once
#include <cblas.h>

namespace convoy {

// OpenBLAS starts with as many threads as the host has cores (up to 64) unless told otherwise. Its
// threads would fight the layers' own OpenMP threads for the cores, and on some CPUs (its generic
// and Haswell kernels, which AMD's Zen cores also get) a threaded sgemm sums in another order than a
// serial one, so the layers' last bits would follow the host's core count. Construct it outside any
// parallel region: the thread count is one per process.
class SerialBlas {
 public:
  SerialBlas() : before_(openblas_get_num_threads()) {
    if (before_ != 1) openblas_set_num_threads(1);
  }
  ~SerialBlas() {
    if (before_ != 1) openblas_set_num_threads(before_);
  }
  SerialBlas(const SerialBlas&) = delete;
  SerialBlas& operator=(const SerialBlas&) = delete;

 private:
  int before_;
};

}  // namespace convoy
