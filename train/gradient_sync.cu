// GradientSync: a bucket is sent once the backward pass has queued its last range; its all-reduce
// waits on the comm stream for what the compute stream queued so far, and its update waits on the
// update stream for its all-reduce, so neither holds up the backward pass nor the next all-reduce.
// A deferred bucket is all-reduced from the gradients the step before left, in forward order, so
// that the forward pass can start on the first layers while the later ones' sums travel.
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
  for (size_t tail = 0; deferred_ < buckets_.size(); ++deferred_) {
    tail += tail_bucket(deferred_).size() * elem;
    if (tail > o.defer_bytes) break;
  }
  split_ = deferred_ ? tail_bucket(deferred_ - 1).hi : 0;
  if (deferred_) tail_done_.reset(new CudaEvent[deferred_]);
  if (o.precision == GradComm::bf16) arena.request(sums_, std::max<size_t>(1, params_));
  arena.request(tail_scalars_, 1);
}

void GradientSync::start(int rank, float* grads) {
  nccl_ = std::make_unique<NcclComm>(rank, ranks_);
  grads_ = grads;
}

Gradients GradientSync::gradients() const {
  if (o_.precision == GradComm::bf16) return {nullptr, sums_.get(), ranks_};
  return {grads_, nullptr, 1};  // averaged in place by ncclAvg
}

// On the comm stream: the bucket's gradients summed (bf16: rounded first) or averaged (fp32).
void GradientSync::all_reduce(const FlatRange& b) {
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
}

void GradientSync::queue_tail(cudaStream_t s, const Update& update) {
  if (!deferred_) return;
  CONVOY_CUDA_CHECK(cudaEventRecord(fork_.get(), s));
  CONVOY_CUDA_CHECK(cudaStreamWaitEvent(comm_.get(), fork_.get(), 0));
  auto update_after_comm = [&](const FlatRange& at) {
    CONVOY_CUDA_CHECK(cudaEventRecord(reduced_.get(), comm_.get()));
    CONVOY_CUDA_CHECK(cudaStreamWaitEvent(update_.get(), reduced_.get(), 0));
    update({at.lo, at.hi, update_.get()}, gradients(), tail_scalars_.get());
  };
  for (size_t j = 0; j < deferred_; ++j) {
    all_reduce(tail_bucket(j));
    if (!o_.bucket_updates) continue;
    update_after_comm(tail_bucket(j));
    CONVOY_CUDA_CHECK(cudaEventRecord(tail_done_[j].get(), update_.get()));
  }
  if (!o_.bucket_updates) {  // one update after the tail's last all-reduce ends every tail bucket
    update_after_comm({0, split_});
    for (size_t j = 0; j < deferred_; ++j) CONVOY_CUDA_CHECK(cudaEventRecord(tail_done_[j].get(), update_.get()));
  }
  tail_queued_ = true;
  waited_ = 0;
}

void GradientSync::wait_for_params(cudaStream_t s, const FlatRange& r) {
  // The forward pass reads the parameters from the start of the flat buffer upwards.
  for (; tail_queued_ && waited_ < deferred_ && tail_bucket(waited_).lo < r.hi; ++waited_)
    CONVOY_CUDA_CHECK(cudaStreamWaitEvent(s, tail_done_[waited_].get(), 0));
}

void GradientSync::end_tail(cudaStream_t s) {
  if (tail_queued_) CONVOY_CUDA_CHECK(cudaStreamWaitEvent(s, tail_done_[deferred_ - 1].get(), 0));
  tail_queued_ = false;
}

void GradientSync::agree(cudaStream_t s, StepScalars* scalars) {
  // The backward pass overwrites the gradients the tail reads, and finish() its scalars.
  end_tail(s);
  scalars_ = scalars;
  CONVOY_CUDA_CHECK(cudaEventRecord(fork_.get(), s));
  CONVOY_CUDA_CHECK(cudaStreamWaitEvent(comm_.get(), fork_.get(), 0));
  uint32_t* v = &scalars->nonfinite;
  CONVOY_NCCL_CHECK(ncclAllReduce(v, v, 1, ncclUint32, ncclMax, nccl_->get(), comm_.get()));
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
    if (next_ < buckets_.size() - deferred_) flush(s, open_, update);  // the tail waits for the next step
    open_ = {};
    ++next_;
  }
}

void GradientSync::flush(cudaStream_t s, const FlatRange& b, const Update& update) {
  // The bucket's gradients are queued on the compute stream: the comm stream starts after them
  // while the compute stream goes on with the layers below.
  CONVOY_CUDA_CHECK(cudaEventRecord(fork_.get(), s));
  CONVOY_CUDA_CHECK(cudaStreamWaitEvent(comm_.get(), fork_.get(), 0));
  all_reduce(b);
  if (!o_.bucket_updates) return;
  CONVOY_CUDA_CHECK(cudaEventRecord(reduced_.get(), comm_.get()));
  CONVOY_CUDA_CHECK(cudaStreamWaitEvent(update_.get(), reduced_.get(), 0));
  update({b.lo, b.hi, update_.get()}, gradients(), scalars_);
}

void GradientSync::wait_for_comm(cudaStream_t s) {
  if (next_ != buckets_.size()) fail("GradientSync: the backward pass left buckets of its plan unfilled");
  CONVOY_CUDA_CHECK(cudaEventRecord(comm_done_.get(), comm_.get()));
  CONVOY_CUDA_CHECK(cudaStreamWaitEvent(s, comm_done_.get(), 0));
}

void GradientSync::finish(cudaStream_t s, const Update& update) {
  if (o_.bucket_updates) {
    CONVOY_CUDA_CHECK(cudaEventRecord(updates_done_.get(), update_.get()));
    CONVOY_CUDA_CHECK(cudaStreamWaitEvent(s, updates_done_.get(), 0));
  } else {
    update({split_, params_, s}, gradients(), scalars_);
  }
  // The tail's update runs in the next step, under this step's learning rate and verdict.
  if (deferred_)
    CONVOY_CUDA_CHECK(cudaMemcpyAsync(tail_scalars_.get(), scalars_, sizeof(StepScalars), cudaMemcpyDeviceToDevice, s));
}

}  // namespace convoy::gpu
