// MPI for both tools: initialised once (RAII), works under mpirun and as a singleton without it,
// and every MPI call checked with CONVOY_MPI_CHECK, which names the call, file and line.
#pragma once
#include <mpi.h>

#include <string>

namespace convoy {

[[noreturn]] void mpi_fail(int code, const char* call, const char* file, int line);

#define CONVOY_MPI_CHECK(call)                                              \
  do {                                                                      \
    int convoy_mpi_rc_ = (call);                                            \
    if (convoy_mpi_rc_ != MPI_SUCCESS)                                      \
      ::convoy::mpi_fail(convoy_mpi_rc_, #call, __FILE__, __LINE__);        \
  } while (0)

class MpiContext {
 public:
  MpiContext(int* argc, char*** argv);
  ~MpiContext();
  MpiContext(const MpiContext&) = delete;
  MpiContext& operator=(const MpiContext&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }  // rank among the processes of this node
  int local_size() const { return local_size_; }
  // A failure on one rank must not leave the others waiting in a collective forever.
  [[noreturn]] void abort(int code) const;

 private:
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
};

}  // namespace convoy
