// The second step is the measure: the first includes the warm-up (first allocations, the loader's
// first batches), and a later one would come after the first Ctrl-C of an impatient user.
#include "train/kill_grace.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "shared/log.h"

namespace convoy {
namespace {
// Room for a step and the write, with some to spare. mpirun waits this long twice (before its
// SIGTERM and again before its SIGKILL), so more than needed makes every Ctrl-C slower.
int suggested(double step_seconds) { return std::max(5, int(std::ceil(3 * step_seconds))); }

// The grace of the mpirun that started this process; none under another launcher.
std::optional<double> mpirun_kill_grace() {
  // Open MPI's mpirun (and its orted daemons) set this for every process they start.
  if (!std::getenv("OMPI_MCA_orte_hnp_uri")) return std::nullopt;
  const char* set = std::getenv("OMPI_MCA_odls_base_sigkill_timeout");
  return set && *set ? std::atof(set) : 1.0;
}
}  // namespace

KillGraceCheck::KillGraceCheck(bool warn) {
  if (warn) grace_ = mpirun_kill_grace();
}

void KillGraceCheck::step_done() {
  if (!grace_) return;
  const double seconds = lap_.lap();
  if (++steps_ < 2) return;
  if (seconds > *grace_ / 2)
    log_warn(
        "a step takes %.2f s, but on a Ctrl-C or SIGTERM mpirun sends its ranks SIGKILL %g s after their SIGTERM "
        "(odls_base_sigkill_timeout): the checkpoint of such a stop may be lost; start mpirun with "
        "--mca odls_base_sigkill_timeout %d (or export OMPI_MCA_odls_base_sigkill_timeout=%d)",
        seconds, *grace_, suggested(seconds), suggested(seconds));
  grace_.reset();
}

}  // namespace convoy
