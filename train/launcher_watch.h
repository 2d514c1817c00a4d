// The launcher's end as a stop: under a PMIx server (Open MPI's mpirun or orted, srun --mpi=pmix),
// a rank that loses its connection to it stops at its next step boundary with its checkpoint.
#pragma once
#include <cstddef>

namespace convoy {

// While it lives, the loss of the connection to the PMIx server that started this process is
// recorded as SIGTERM (stop_signal.h), in place of Open MPI's default reaction, which aborts the
// rank at once. mpirun goes away first on a second SIGINT or SIGTERM within 5 s (Ctrl-C pressed
// twice; `timeout`, which signals mpirun and then its process group; a scheduler's INT then TERM),
// when it is killed, or when it fails. Without PMIx it does nothing. It holds a reference to the
// PMIx client, so it must end before MPI_Finalize.
class LauncherWatch {
 public:
  LauncherWatch();
  ~LauncherWatch();
  LauncherWatch(const LauncherWatch&) = delete;
  LauncherWatch& operator=(const LauncherWatch&) = delete;

 private:
  bool active_ = false;
  size_t handler_ = 0;
};

}  // namespace convoy
