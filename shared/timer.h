// Wall-clock timing: a stopwatch and named phase accumulators for the per-phase breakdowns
// (datagen: read/decode/resize/write; train: t_io, t_h2d, t_fwd, t_bwd, t_update, t_comm).
#pragma once
#include <chrono>

namespace convoy {

class Stopwatch {
 public:
  Stopwatch() : start_(clock::now()) {}
  void reset() { start_ = clock::now(); }
  double seconds() const { return std::chrono::duration<double>(clock::now() - start_).count(); }
  // Seconds since the last lap (or start), and starts a new lap.
  double lap() {
    auto now = clock::now();
    double s = std::chrono::duration<double>(now - start_).count();
    start_ = now;
    return s;
  }

 private:
  using clock = std::chrono::steady_clock;
  clock::time_point start_;
};

}  // namespace convoy
