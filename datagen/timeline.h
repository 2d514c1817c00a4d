// A per-thread timeline of a datagen run (--timeline FILE): what each thread of each rank did when,
// written by rank 0 as Chrome trace-event JSON (chrome://tracing, ui.perfetto.dev): a process per rank.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace convoy::datagen {

// What a span of one thread's time went to. Start-up and end steps run on each rank's main thread
// (which is also decoding thread 0), samples on the decoding threads, files on the writer threads.
enum class Span : uint8_t {
  exec,       // the process's start to main (loading the shared libraries); to the clock tick
  mpi_init,   // MPI_Init (no MPI at all for a process started without a launcher)
  index,      // rank 0: the index scanned or reused, the output folder prepared
  broadcast,  // the index to every rank, parsed
  plan,       // the permutation and this rank's share
  setup,      // the inputs opened, the writer threads started
  read,
  decode,
  resize,
  encode,
  stats,
  assemble,
  wait,    // a decoding thread blocked: for work, or for room among the files held in memory
  gpu,     // a decoding thread's GPU lane (staging and waiting for it)
  write,   // a writer thread: checksums and the file's bytes to the kernel
  fsync,   // a writer thread: the file made durable and renamed
  drain,   // the main thread waiting for the last files' writes once every sample is made
  reduce,  // statistics and results to rank 0
  finish,  // rank 0: rejects.tsv, mean_image.png, dataset.json
  count
};
const char* span_name(Span s);

using TimePoint = std::chrono::steady_clock::time_point;

// Process-wide. Off, add() is one relaxed load; on, it appends 24 bytes to the calling thread's
// own track (no lock), so the timeline can stay on for whole runs.
class Timeline {
 public:
  static void enable();
  static bool on();
  // Names the calling thread's track (a thread that records unnamed gets "thread N"); `sort`
  // orders the tracks of a rank.
  static void name_thread(const std::string& name, int sort);
  static void add(Span s, TimePoint begin, TimePoint end);
  // The exec span: the `seconds` (process_seconds()) up to now.
  static void add_exec(double seconds);
  // The earliest recorded time, in microseconds of the real-time clock (INT64_MAX when empty).
  static int64_t first_us();
  // This process's tracks and spans as trace events (JSON objects joined by commas), with
  // pid = rank and times counted from origin_us.
  static std::string events(int rank, int64_t origin_us);
  // The JSON document of every rank's events.
  static std::string document(const std::vector<std::string>& per_rank);
};

// Seconds since this process started, from the kernel's start time (to the clock tick, 10 ms).
double process_seconds();

// Consecutive spans of one thread: each call ends the current span, records it as `s` and returns
// its seconds, so a phase's sum and its span come from the same two clock readings.
class Laps {
 public:
  Laps() : last_(std::chrono::steady_clock::now()) {}
  double operator()(Span s);
  // Starts the next span now without recording the time since the last.
  void restart() { last_ = std::chrono::steady_clock::now(); }

 private:
  TimePoint last_;
};

// One span from construction to destruction (or to end()); recorded only if it lasted at least
// `shortest` seconds (a wait that did not block is not worth an event).
class ScopedSpan {
 public:
  explicit ScopedSpan(Span s, double shortest = 0)
      : s_(s), shortest_(shortest), begin_(std::chrono::steady_clock::now()) {}
  ~ScopedSpan() { end(); }
  ScopedSpan(const ScopedSpan&) = delete;
  ScopedSpan& operator=(const ScopedSpan&) = delete;
  // Ends the span now (once); returns its seconds.
  double end();

 private:
  Span s_;
  double shortest_;
  TimePoint begin_;
  bool ended_ = false;
  double seconds_ = 0;
};

}  // namespace convoy::datagen
