// SIGINT, SIGTERM, SIGHUP and SIGPIPE during training, and the loss of the launcher: each only
// records a stop, which the loop reads after each step; it writes the checkpoint, exits 128 + signal.
#pragma once
#include <csignal>

#include "train/kill_grace.h"
#include "train/launcher_watch.h"

namespace convoy {

// While it lives, SIGINT and SIGTERM, and SIGHUP and SIGPIPE unless they were ignored (nohup), are
// recorded instead of ending the process, and so is the loss of the launcher (launcher_watch.h).
// SIGHUP: the terminal was closed. SIGPIPE: whatever read the output went away, mpirun included,
// which relays its ranks' output and may exit before them (launcher_watch.h). Their earlier actions
// come back at its end, which must come before MPI_Finalize.
class StopSignals {
 public:
  // warn_grace: warn when mpirun's grace looks too short for a step (kill_grace.h); rank 0 of a
  // run that writes a checkpoint.
  explicit StopSignals(bool warn_grace);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // After each training step.
  void step_done() { grace_.step_done(); }

 private:
  static constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
  static constexpr int kCount = 4;
  struct sigaction old_[kCount] = {};
  bool caught_[kCount] = {};
  LauncherWatch launcher_;
  KillGraceCheck grace_;
};

// Records a stop unless one is already recorded (async-signal-safe).
void record_stop(int sig);
void clear_stop_signal();
int stop_signal();  // the first stop recorded since clear_stop_signal(), 0: none

}  // namespace convoy
