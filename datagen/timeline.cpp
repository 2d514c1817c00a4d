// Each thread appends to a track of its own, registered once under a lock and kept for the
// process's life (OpenMP's threads outlive the region), so recording takes no lock. Times are the
// steady clock's, shifted once to the real-time clock, which every process of a node shares.
#include "datagen/timeline.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>

namespace convoy::datagen {
namespace {

constexpr std::array<const char*, size_t(Span::count)> kNames = {
    "exec",  "MPI init", "index", "broadcast", "plan",  "set-up", "read",  "decode", "resize", "encode",
    "stats", "assemble", "wait",  "gpu",       "write", "fsync",  "drain", "reduce", "finish"};

// A track keeps at most this many spans (96 MB); later ones are counted, not kept.
constexpr size_t kMaxSpans = size_t(4) << 20;

struct Record {
  int64_t begin_ns, end_ns;
  Span span;
};

struct Track {
  std::string name;
  int sort = 0;
  std::vector<Record> spans;
  size_t dropped = 0;
};

std::atomic<bool> g_on{false};
std::atomic<int64_t> g_offset_ns{0};  // real-time minus steady clock, taken at enable()
std::mutex g_mu;
std::vector<std::unique_ptr<Track>> g_tracks;
thread_local Track* t_track = nullptr;

int64_t ns(TimePoint t) { return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count(); }

int64_t clock_ns(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

Track& my_track() {
  if (t_track) return *t_track;
  std::lock_guard<std::mutex> lock(g_mu);
  g_tracks.push_back(std::make_unique<Track>());
  t_track = g_tracks.back().get();
  t_track->sort = 1000 + int(g_tracks.size());
  t_track->name = "thread " + std::to_string(g_tracks.size() - 1);
  return *t_track;
}

}  // namespace

double process_seconds() {
  FILE* f = std::fopen("/proc/self/stat", "r");
  if (!f) return 0;
  char buf[1024] = {0};
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = 0;
  const char* p = std::strrchr(buf, ')');  // the command's name may hold spaces
  unsigned long long start_ticks = 0;
  if (!p || std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
                        &start_ticks) != 1)
    return 0;
  const double start_s = double(start_ticks) / double(sysconf(_SC_CLK_TCK));
  return std::max(0.0, double(clock_ns(CLOCK_BOOTTIME)) * 1e-9 - start_s);
}

namespace {

void append_event(std::string& out, const char* name, int pid, size_t tid, int64_t begin_us_x1000, int64_t dur_ns) {
  char buf[192];
  const int n = std::snprintf(buf, sizeof buf,
                              ",\n{\"name\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%zu,\"ts\":%.3f,\"dur\":%.3f}", name,
                              pid, tid, double(begin_us_x1000) / 1000.0, double(dur_ns) / 1000.0);
  out.append(buf, size_t(n));
}

void append_meta(std::string& out, const char* what, int pid, long tid, const std::string& key,
                 const std::string& value) {
  out += ",\n{\"name\":\"" + std::string(what) + "\",\"ph\":\"M\",\"pid\":" + std::to_string(pid);
  if (tid >= 0) out += ",\"tid\":" + std::to_string(tid);
  out += ",\"args\":{\"" + key + "\":" + value + "}}";
}

}  // namespace

const char* span_name(Span s) { return size_t(s) < kNames.size() ? kNames[size_t(s)] : "?"; }

void Timeline::enable() {
  g_offset_ns.store(clock_ns(CLOCK_REALTIME) - ns(std::chrono::steady_clock::now()));
  g_on.store(true);
}

bool Timeline::on() { return g_on.load(std::memory_order_relaxed); }

void Timeline::name_thread(const std::string& name, int sort) {
  if (!on()) return;
  Track& t = my_track();
  std::lock_guard<std::mutex> lock(g_mu);  // events() may read the names
  t.name = name;
  t.sort = sort;
}

void Timeline::add(Span s, TimePoint begin, TimePoint end) {
  if (!on()) return;
  Track& t = my_track();
  if (t.spans.size() >= kMaxSpans) {
    ++t.dropped;
    return;
  }
  t.spans.push_back({ns(begin), ns(end), s});
}

void Timeline::add_exec(double seconds) {
  if (!on()) return;
  const TimePoint now = std::chrono::steady_clock::now();
  add(Span::exec, now - std::chrono::nanoseconds(int64_t(seconds * 1e9)), now);
}

int64_t Timeline::first_us() {
  std::lock_guard<std::mutex> lock(g_mu);
  int64_t first = INT64_MAX;
  for (const auto& t : g_tracks)
    for (const Record& r : t->spans) first = std::min(first, r.begin_ns);
  return first == INT64_MAX ? first : (first + g_offset_ns.load()) / 1000;
}

std::string Timeline::events(int rank, int64_t origin_us) {
  std::lock_guard<std::mutex> lock(g_mu);
  std::string out;
  size_t spans = 0;
  for (const auto& t : g_tracks) spans += t->spans.size();
  out.reserve(spans * 96 + 4096);
  append_meta(out, "process_name", rank, -1, "name", "\"rank " + std::to_string(rank) + "\"");
  append_meta(out, "process_sort_index", rank, -1, "sort_index", std::to_string(rank));
  const int64_t shift_ns = g_offset_ns.load() - origin_us * 1000;
  for (size_t tid = 0; tid < g_tracks.size(); ++tid) {
    const Track& t = *g_tracks[tid];
    std::string name = t.name;
    if (t.dropped) name += " (" + std::to_string(t.dropped) + " later spans not kept)";
    append_meta(out, "thread_name", rank, long(tid), "name", "\"" + name + "\"");
    append_meta(out, "thread_sort_index", rank, long(tid), "sort_index", std::to_string(t.sort));
    for (const Record& r : t.spans)
      append_event(out, span_name(r.span), rank, tid, r.begin_ns + shift_ns, r.end_ns - r.begin_ns);
  }
  return out.substr(2);  // the first ",\n"
}

std::string Timeline::document(const std::vector<std::string>& per_rank) {
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  bool first = true;
  for (const std::string& r : per_rank) {
    if (r.empty()) continue;
    if (!first) out += ",\n";
    out += r;
    first = false;
  }
  out += "\n]}\n";
  return out;
}

double Laps::operator()(Span s) {
  const TimePoint now = std::chrono::steady_clock::now();
  Timeline::add(s, last_, now);
  const double seconds = std::chrono::duration<double>(now - last_).count();
  last_ = now;
  return seconds;
}

double ScopedSpan::end() {
  if (ended_) return seconds_;
  ended_ = true;
  const TimePoint now = std::chrono::steady_clock::now();
  seconds_ = std::chrono::duration<double>(now - begin_).count();
  if (seconds_ >= shortest_) Timeline::add(s_, begin_, now);
  return seconds_;
}

}  // namespace convoy::datagen
