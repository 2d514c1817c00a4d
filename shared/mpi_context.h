// MPI for both tools: initialised once (RAII), works under mpirun and as a singleton without it,
// and every MPI call checked with CONVOY_MPI_CHECK, which names the call, file and line.
#pragma once
#include <mpi.h>

#include <string>

namespace convoy {

[[noreturn]] void mpi_fail(int code, const char* call, const char* file, int line);

#define CONVOY_MPI_CHECK(call)                                                                        \
  do {                                                                                                \
    int convoy_mpi_rc_ = (call);                                                                      \
    if (convoy_mpi_rc_ != MPI_SUCCESS) ::convoy::mpi_fail(convoy_mpi_rc_, #call, __FILE__, __LINE__); \
  } while (0)

class MpiContext {
 public:
  // always: MPI_Init in every case. when_launched: only in a process a launcher started (mpirun,
  // srun, hydra, jsrun, ...: found by the variables they set; CONVOY_MPI=1 forces MPI, 0 forbids
  // it); a process started alone is then rank 0 of 1 without MPI, which spares MPI's start-up
  // (Open MPI's singleton forks an orted and loads its components: a quarter to half a second).
  // Without MPI every MPI call is the caller's to skip (size() == 1).
  enum class Start { always, when_launched };
  MpiContext(int* argc, char*** argv, Start start = Start::always);
  ~MpiContext();
  MpiContext(const MpiContext&) = delete;
  MpiContext& operator=(const MpiContext&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }  // rank among the processes of this node
  int local_size() const { return local_size_; }
  int hosts() const { return hosts_; }               // the hosts the ranks span, as NCCL sees them (NCCL_HOSTID)
  bool initialized() const { return initialized_; }  // whether MPI was started
  // A failure on one rank must not leave the others waiting in a collective forever.
  [[noreturn]] void abort(int code) const;

 private:
  int count_hosts(int local_leader) const;

  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, hosts_ = 1;
  bool initialized_ = false;
};

}  // namespace convoy
