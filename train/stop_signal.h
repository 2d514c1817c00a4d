// The signals that would end training (INT, TERM, HUP, PIPE, USR1, USR2) and the loss of the
// launcher only record a stop; the loop reads it after each step, writes the checkpoint and exits.
#pragma once
#include <csignal>

#include "train/kill_grace.h"
#include "train/launcher_watch.h"

namespace convoy {

// While it lives, SIGINT and SIGTERM, and the others unless they were ignored (nohup), are
// recorded instead of ending the process (the exit status is then 128 + the signal), and so is the
// loss of the launcher (launcher_watch.h). SIGHUP: the terminal was closed. SIGPIPE: whatever read
// the output went away, mpirun included, which relays its ranks' output and may exit before them.
// SIGUSR1, SIGUSR2: a scheduler's warning ahead of its time limit (Slurm's --signal, LSF's -wa),
// which mpirun forwards to its ranks. Their earlier actions come back at its end, which must come
// before MPI_Finalize.
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
  static constexpr int kCount = 6;
  static constexpr int kSignals[kCount] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGUSR1, SIGUSR2};
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
