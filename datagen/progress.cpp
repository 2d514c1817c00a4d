// Progress reports travel as one small message per batch file (tag kTag); rank 0 drains them
// between its own batch files and, at the end, until every rank has reported everything.
#include "datagen/progress.h"

#include <unistd.h>

#include <cstdio>
#include <string>

namespace convoy::datagen {
namespace {
constexpr int kTag = 4711;
}

Progress::Progress(const MpiContext& mpi, uint64_t total, std::vector<uint64_t> files_per_rank)
    : mpi_(mpi), total_(total), pending_(std::move(files_per_rank)), tty_(::isatty(2) == 1) {}

void Progress::file_done(uint64_t samples) {
  if (mpi_.rank() != 0) {
    CONVOY_MPI_CHECK(MPI_Send(&samples, 1, MPI_UINT64_T, 0, kTag, MPI_COMM_WORLD));
    return;
  }
  done_ += samples;
  --pending_[0];
  if (mpi_.size() > 1) poll(false);
  print(false);
}

void Progress::poll(bool block) {
  for (;;) {
    int ready = 0;
    MPI_Status st;
    if (block) {
      CONVOY_MPI_CHECK(MPI_Probe(MPI_ANY_SOURCE, kTag, MPI_COMM_WORLD, &st));
      ready = 1;
    } else {
      CONVOY_MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, kTag, MPI_COMM_WORLD, &ready, &st));
    }
    if (!ready) return;
    uint64_t n = 0;
    CONVOY_MPI_CHECK(MPI_Recv(&n, 1, MPI_UINT64_T, st.MPI_SOURCE, kTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    done_ += n;
    --pending_[size_t(st.MPI_SOURCE)];
    if (block) return;
  }
}

void Progress::finish() {
  if (mpi_.rank() != 0) return;
  auto outstanding = [&] {
    uint64_t s = 0;
    for (uint64_t p : pending_) s += p;
    return s;
  };
  while (outstanding() > 0) {
    poll(true);
    print(false);
  }
  print(true);
}

void Progress::print(bool final) {
  const double t = clock_.seconds();
  if (!final && t - last_print_ < (tty_ ? 0.25 : 5.0)) return;
  last_print_ = t;
  const double rate = t > 0 ? double(done_) / t : 0.0;
  const double eta = rate > 0 ? double(total_ - done_) / rate : 0.0;
  const int pct = total_ ? int(100.0 * double(done_) / double(total_)) : 100;
  char line[256];
  if (tty_) {
    std::string bar(30, ' ');
    for (int i = 0; i < pct * 30 / 100; ++i) bar[size_t(i)] = '#';
    std::snprintf(line, sizeof line, "\rdatagen: [%s] %llu/%llu images  %.0f img/s  ETA %.0f s%s", bar.c_str(),
                  (unsigned long long)done_, (unsigned long long)total_, rate, eta, final ? "\n" : "");
  } else {
    std::snprintf(line, sizeof line, "datagen: progress %llu/%llu images (%d%%), %.0f img/s, ETA %.0f s\n",
                  (unsigned long long)done_, (unsigned long long)total_, pct, rate, eta);
  }
  std::fputs(line, stderr);
  std::fflush(stderr);
}

}  // namespace convoy::datagen
