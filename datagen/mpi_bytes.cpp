// A length first, then the bytes: the receivers size their buffers before the data arrives.
// A single process skips MPI altogether.
#include "datagen/mpi_bytes.h"

#include <algorithm>
#include <cstdint>

namespace convoy::datagen {

void bcast_string(std::string& s, int root) {
  uint64_t n = s.size();
  CONVOY_MPI_CHECK(MPI_Bcast(&n, 1, MPI_UINT64_T, root, MPI_COMM_WORLD));
  s.resize(n);
  constexpr uint64_t chunk = 1 << 30;
  for (uint64_t at = 0; at < n; at += chunk)
    CONVOY_MPI_CHECK(MPI_Bcast(s.data() + at, int(std::min(chunk, n - at)), MPI_CHAR, root, MPI_COMM_WORLD));
}

std::vector<std::string> gather_strings(const std::string& mine, const MpiContext& mpi) {
  if (mpi.size() == 1) return {mine};
  int len = int(mine.size());
  std::vector<int> lens(size_t(mpi.size())), displs(size_t(mpi.size()));
  CONVOY_MPI_CHECK(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD));
  std::string all;
  if (mpi.rank() == 0) {
    int at = 0;
    for (size_t r = 0; r < lens.size(); ++r) displs[r] = at, at += lens[r];
    all.resize(size_t(at));
  }
  CONVOY_MPI_CHECK(
      MPI_Gatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0, MPI_COMM_WORLD));
  std::vector<std::string> out;
  if (mpi.rank() == 0)
    for (size_t r = 0; r < lens.size(); ++r) out.push_back(all.substr(size_t(displs[r]), size_t(lens[r])));
  return out;
}

}  // namespace convoy::datagen
