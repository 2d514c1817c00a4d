// NCCL across the MPI ranks, one GPU per rank: the unique id travels from rank 0 over MPI, so the
// same code runs on one node or many. CONVOY_NCCL_CHECK names the call, file and line.
#pragma once
#include <nccl.h>

#include <string>

#include "shared/error.h"

#define CONVOY_NCCL_CHECK(call)                                                                              \
  do {                                                                                                       \
    ncclResult_t convoy_nccl_rc_ = (call);                                                                   \
    if (convoy_nccl_rc_ != ncclSuccess)                                                                      \
      ::convoy::fail(std::string(#call) + " failed at " + __FILE__ + ":" + std::to_string(__LINE__) + ": " + \
                     ncclGetErrorString(convoy_nccl_rc_));                                                   \
  } while (0)

namespace convoy::gpu {

class NcclComm {
 public:
  // Collective over MPI_COMM_WORLD; call after cudaSetDevice of this rank's GPU.
  NcclComm(int rank, int ranks);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;
  ncclComm_t get() const { return comm_; }

 private:
  ncclComm_t comm_ = nullptr;
};

}  // namespace convoy::gpu
