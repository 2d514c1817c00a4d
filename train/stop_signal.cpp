// The record is a lock-free atomic: the handler may run on any thread (the loader's readers too),
// and such an atomic is both async-signal-safe and free of data races.
#include "train/stop_signal.h"

#include <atomic>
#include <csignal>

namespace convoy {
namespace {

std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal flag must be lock-free");
extern "C" void on_signal(int sig) { g_signal.store(sig, std::memory_order_relaxed); }

}  // namespace

void catch_stop_signals() {
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
}

void clear_stop_signal() { g_signal.store(0); }

int stop_signal() { return g_signal.load(); }

}  // namespace convoy
