// NCCL communicator set-up: rank 0 makes the unique id, MPI broadcasts it, every rank joins.
#include "train/nccl_comm.h"

#include "shared/mpi_context.h"

namespace convoy::gpu {

NcclComm::NcclComm(int rank, int ranks) {
  ncclUniqueId id;
  if (rank == 0) CONVOY_NCCL_CHECK(ncclGetUniqueId(&id));
  CONVOY_MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD));
  CONVOY_NCCL_CHECK(ncclCommInitRank(&comm_, ranks, id, rank));
}

NcclComm::~NcclComm() {
  if (comm_) ncclCommDestroy(comm_);
}

}  // namespace convoy::gpu
