// MPI start-up and shutdown; the local rank comes from a shared-memory split of COMM_WORLD, so
// it is right under any launcher (mpirun, srun, jsrun).
#include "shared/mpi_context.h"

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "shared/error.h"

namespace convoy {

void mpi_fail(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(code, text, &len);
  fail(std::string("MPI call ") + call + " failed at " + file + ":" + std::to_string(line) + ": " + text);
}

namespace {

// Whether a launcher started this process: the variables Open MPI's mpirun, PMI and PMIx (srun,
// MPICH's and Intel MPI's hydra, MVAPICH), IBM's jsrun and Cray's ALPS and PALS set for each
// process they start.
bool launched() {
  if (const char* force = std::getenv("CONVOY_MPI"); force && *force) return std::string(force) != "0";
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "PMI_FD", "MPI_LOCALNRANKS",
                        "JSM_NAMESPACE_SIZE", "ALPS_APP_PE", "PALS_RANKID"})
    if (std::getenv(v)) return true;
  return false;
}

}  // namespace

MpiContext::MpiContext(int* argc, char*** argv, Start start) {
  if (start == Start::when_launched && !launched()) return;
  initialized_ = true;
  // Open MPI's hwloc would otherwise load its OpenCL plugin, which on a GPU host starts NVIDIA's
  // OpenCL driver and with it the CUDA driver in every process, a CPU-only datagen run included.
  // Neither tool binds by OpenCL devices. Values the user set are left as they are.
  setenv("HWLOC_PLUGINS_BLACKLIST", "hwloc_opencl", 0);
  setenv("HWLOC_COMPONENTS", "-opencl", 0);
  int provided = 0;
  CONVOY_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
  CONVOY_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  CONVOY_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  MPI_Comm local;
  CONVOY_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local));
  CONVOY_MPI_CHECK(MPI_Comm_rank(local, &local_rank_));
  CONVOY_MPI_CHECK(MPI_Comm_size(local, &local_size_));
  int leader = rank_;
  CONVOY_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, local));
  CONVOY_MPI_CHECK(MPI_Comm_free(&local));
  hosts_ = count_hosts(leader);
}

// NCCL takes ranks with the same NCCL_HOSTID (where it is set) for one host, else those of one
// machine; the ranks agree on the count, which says whether the gradients leave a host.
int MpiContext::count_hosts(int local_leader) const {
  const char* id = std::getenv("NCCL_HOSTID");
  const std::string key = id && *id ? std::string("id:") + id : "node:" + std::to_string(local_leader);
  unsigned long long mine = std::hash<std::string>{}(key);
  std::vector<unsigned long long> all(size_t(size_), 0);
  CONVOY_MPI_CHECK(
      MPI_Allgather(&mine, 1, MPI_UNSIGNED_LONG_LONG, all.data(), 1, MPI_UNSIGNED_LONG_LONG, MPI_COMM_WORLD));
  return int(std::set<unsigned long long>(all.begin(), all.end()).size());
}

MpiContext::~MpiContext() {
  if (initialized_) MPI_Finalize();
}

void MpiContext::abort(int code) const {
  if (initialized_ && size_ > 1) MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

}  // namespace convoy
