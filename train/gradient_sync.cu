// GradientSync: a bucket is sent once the backward pass has queued its last range; its all-reduce
// waits on the comm stream for what the compute stream queued so far, and its update waits on the
// update stream for its all-reduce, so neither holds up the backward pass nor the next all-reduce.
#include "train/gradient_sync.h"

#include <algorithm>

namespace convoy::gpu {
namespace {

__global__ void round_to_bf16(size_t lo, size_t hi, const float* __restrict__ g, bf16* __restrict__ out) {
  for (size_t i = lo + blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < hi; i += size_t(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16_rn(g[i]);
}

size_t flat_param_count(const Net& net) {
  size_t n = 0;
  for (const FlatRange& r : backward_ranges(net.nodes())) n = std::max(n, r.hi);
  return n;
}

}  // namespace

GradientSync::GradientSync(Arena& arena, const Net& net, int ranks, const GradSyncOptions& o)
    : o_(o), ranks_(ranks), params_(flat_param_count(net)) {
  // Buckets are cut by their fp32 gradients' bytes, whatever goes on the wire: in bf16 they carry
  // as many gradients in half the bytes (measured best on a slow link, docs/PERFORMANCE.md).
  const size_t elem = o.precision == GradComm::bf16 ? sizeof(bf16) : sizeof(float);
  buckets_ = plan_buckets(backward_ranges(net.nodes()), sizeof(float), o.bucket_bytes);
  // Bucket updates leave alone what no bucket holds: every parameter must be in one.
  size_t covered = 0;
  for (const FlatRange& b : buckets_) covered += b.size();
  if (covered != params_) fail("GradientSync: the net's parameter ranges do not cover its flat buffer");
  wire_bytes_ = step_wire_bytes(buckets_, elem, ranks);
  if (o.precision == GradComm::bf16) arena.request(sums_, std::max<size_t>(1, params_));
}

void GradientSync::start(int rank, float* grads) {
  nccl_ = std::make_unique<NcclComm>(rank, ranks_);
  grads_ = grads;
}

Gradients GradientSync::gradients() const {
  if (o_.precision == GradComm::bf16) return {nullptr, sums_.get(), ranks_};
  return {grads_, nullptr, 1};  // averaged in place by ncclAvg
}

void GradientSync::agree(cudaStream_t s, uint32_t* nonfinite) {
  CONVOY_CUDA_CHECK(cudaEventRecord(fork_.get(), s));
  CONVOY_CUDA_CHECK(cudaStreamWaitEvent(comm_.get(), fork_.get(), 0));
  CONVOY_NCCL_CHECK(ncclAllReduce(nonfinite, nonfinite, 1, ncclUint32, ncclMax, nccl_->get(), comm_.get()));
  next_ = 0;
  open_ = {};
}

void GradientSync::ready(cudaStream_t s, const FlatRange& r, const Update& update) {
  // Ranges arrive from the end of the flat buffer towards its start, as plan_buckets took them.
  if (next_ >= buckets_.size() || (!open_.empty() && r.hi != open_.lo))
    fail("GradientSync: the backward pass completed a range its bucket plan does not hold");
  open_ = open_.empty() ? r : FlatRange{r.lo, open_.hi};
  if (open_.hi != buckets_[next_].hi || open_.lo < buckets_[next_].lo)
    fail("GradientSync: the backward pass's ranges differ from its bucket plan");
  if (open_ == buckets_[next_]) {
    flush(s, open_, update);
    open_ = {};
    ++next_;
  }
}

void GradientSync::flush(cudaStream_t s, const FlatRange& b, const Update& update) {
  // The bucket's gradients are queued on the compute stream: the comm stream starts after them
  // while the compute stream goes on with the layers below.
  CONVOY_CUDA_CHECK(cudaEventRecord(fork_.get(), s));
  CONVOY_CUDA_CHECK(cudaStreamWaitEvent(comm_.get(), fork_.get(), 0));
  cudaStream_t c = comm_.get();
  if (o_.precision == GradComm::bf16) {
    round_to_bf16<<<grid_for(b.size()), 256, 0, c>>>(b.lo, b.hi, grads_, sums_.get());
    CONVOY_CUDA_CHECK_LAUNCH();
    bf16* x = sums_.get() + b.lo;
    CONVOY_NCCL_CHECK(ncclAllReduce(x, x, b.size(), ncclBfloat16, ncclSum, nccl_->get(), c));
  } else {
    float* x = grads_ + b.lo;
    CONVOY_NCCL_CHECK(ncclAllReduce(x, x, b.size(), ncclFloat, ncclAvg, nccl_->get(), c));
  }
  if (!o_.bucket_updates) return;
  CONVOY_CUDA_CHECK(cudaEventRecord(reduced_.get(), c));
  CONVOY_CUDA_CHECK(cudaStreamWaitEvent(update_.get(), reduced_.get(), 0));
  update({b.lo, b.hi, update_.get()}, gradients());
}

void GradientSync::broadcast_from_first(cudaStream_t s, float* x, size_t n) {
  CONVOY_CUDA_CHECK(cudaEventRecord(fork_.get(), s));
  CONVOY_CUDA_CHECK(cudaStreamWaitEvent(comm_.get(), fork_.get(), 0));
  CONVOY_NCCL_CHECK(ncclBroadcast(x, x, n, ncclFloat, 0, nccl_->get(), comm_.get()));
  CONVOY_CUDA_CHECK(cudaEventRecord(comm_done_.get(), comm_.get()));
  CONVOY_CUDA_CHECK(cudaStreamWaitEvent(s, comm_done_.get(), 0));
}

void GradientSync::wait_for_comm(cudaStream_t s) {
  if (next_ != buckets_.size()) fail("GradientSync: the backward pass left buckets of its plan unfilled");
  CONVOY_CUDA_CHECK(cudaEventRecord(comm_done_.get(), comm_.get()));
  CONVOY_CUDA_CHECK(cudaStreamWaitEvent(s, comm_done_.get(), 0));
}

void GradientSync::finish(cudaStream_t s, const Update& update) {
  if (!o_.bucket_updates) return update({0, params_, s}, gradients());
  CONVOY_CUDA_CHECK(cudaEventRecord(updates_done_.get(), update_.get()));
  CONVOY_CUDA_CHECK(cudaStreamWaitEvent(s, updates_done_.get(), 0));
}

}  // namespace convoy::gpu
