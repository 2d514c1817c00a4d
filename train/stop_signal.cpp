// The record is a lock-free atomic: the handler may run on any thread (the loader's readers, PMIx's
// own), and such an atomic is both async-signal-safe and free of data races.
#include "train/stop_signal.h"

#include <atomic>

namespace convoy {
namespace {

std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal flag must be lock-free");
extern "C" void on_signal(int sig) { record_stop(sig); }

}  // namespace

StopSignals::StopSignals(bool warn_grace) : grace_(warn_grace) {
  struct sigaction act = {};
  act.sa_handler = on_signal;
  act.sa_flags = SA_RESTART;
  sigemptyset(&act.sa_mask);
  for (int i = 0; i < kCount; ++i) {
    sigaction(kSignals[i], nullptr, &old_[i]);
    // A signal the caller asked to be ignored (nohup) stays ignored, but for SIGINT and SIGTERM,
    // caught as always (a shell ignores SIGINT in the jobs it starts in the background).
    const bool optional = kSignals[i] != SIGINT && kSignals[i] != SIGTERM;
    if (optional && old_[i].sa_handler == SIG_IGN) continue;
    caught_[i] = sigaction(kSignals[i], &act, nullptr) == 0;
  }
}

StopSignals::~StopSignals() {
  for (int i = 0; i < kCount; ++i)
    if (caught_[i]) sigaction(kSignals[i], &old_[i], nullptr);
}

void record_stop(int sig) {
  int none = 0;
  g_signal.compare_exchange_strong(none, sig, std::memory_order_relaxed);
}

void clear_stop_signal() { g_signal.store(0); }

int stop_signal() { return g_signal.load(); }

}  // namespace convoy
