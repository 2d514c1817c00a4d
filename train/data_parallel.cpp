// MPI collectives over float buffers; MPI_Bcast/Allreduce counts are int, so large buffers go
// in chunks.
#include "train/data_parallel.h"

#include <algorithm>

#include "shared/mpi_context.h"

namespace convoy {
namespace {
constexpr size_t kChunk = size_t(1) << 30;
}

void broadcast_floats(std::vector<float>& v) {
  unsigned long long n = v.size();
  CONVOY_MPI_CHECK(MPI_Bcast(&n, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD));
  v.resize(n);
  for (size_t at = 0; at < n; at += kChunk)
    CONVOY_MPI_CHECK(MPI_Bcast(v.data() + at, int(std::min<size_t>(kChunk, n - at)), MPI_FLOAT, 0, MPI_COMM_WORLD));
}

void average_gradients(std::vector<float>& g, int ranks) {
  for (size_t at = 0; at < g.size(); at += kChunk)
    CONVOY_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, g.data() + at, int(std::min(kChunk, g.size() - at)), MPI_FLOAT,
                                   MPI_SUM, MPI_COMM_WORLD));
  const float inv = 1.f / float(ranks);
  for (float& x : g) x *= inv;
}

bool any_rank(bool flag) {
  int f = flag ? 1 : 0;
  CONVOY_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &f, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  return f != 0;
}

void sum_over_ranks(double* values, int count) {
  CONVOY_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, values, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
}

}  // namespace convoy
