// mpirun's grace: on its own SIGINT or SIGTERM, Open MPI's mpirun sends its ranks SIGCONT, then
// SIGTERM odls_base_sigkill_timeout seconds later (1 by default), then SIGKILL as long after that.
#pragma once
#include <optional>

#include "shared/timer.h"

namespace convoy {

// A rank writes its checkpoint at the step boundary after the SIGTERM, so one step and the write
// must fit in the grace. After the second step this warns when that step took more than half of
// it, and names the setting that gives more. Only under Open MPI's mpirun, whose ranks find
// the setting in their environment when it was given (--mca or OMPI_MCA_odls_base_sigkill_timeout).
class KillGraceCheck {
 public:
  explicit KillGraceCheck(bool warn);
  void step_done();

 private:
  std::optional<double> grace_;  // seconds; none: nothing (more) to check
  Stopwatch lap_;
  int steps_ = 0;
};

}  // namespace convoy
