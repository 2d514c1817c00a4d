// A training step's gradients averaged over the ranks while the backward pass runs: NCCL all-reduces
// of the buckets bucket_plan.h cuts, on an urgent stream of their own, in bf16, fp32 or scaled fp8; and
// each bucket's optimiser update queued as soon as its all-reduce ends (or one update after the last).
// fp8's scales follow each bucket's largest gradient of the step before, agreed on with the loss;
// int4 goes as an all-to-all of 4-bit blocks and an all-gather of the owners' sums (int4_wire.h),
// fp8_int4 as fp8's reduce-scatter and that all-gather.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "shared/cuda_owners.h"
#include "train/bucket_plan.h"
#include "train/cuda/gpu_context.h"
#include "train/int4_wire.h"
#include "train/nccl_comm.h"
#include "train/net.h"
#include "train/optimizer_update.h"
#include "train/train_options.h"

namespace convoy::gpu {

// Whether NCCL sums e4m3 on this GPU (compute capability 9.0 or newer, NCCL 2.24 or newer).
bool fp8_wire_supported(int device);

struct GradSyncOptions {
  GradComm precision = GradComm::bf16;
  size_t bucket_bytes = size_t(8) << 20;  // an all-reduce's fp32 gradient bytes (plan_buckets)
  bool bucket_updates = true;             // each bucket's update as its all-reduce ends
};

class GradientSync {
 public:
  // Queues the update of the span's parameters from g on the span's stream.
  using Update = std::function<void(const UpdateSpan& at, const Gradients& g)>;

  // Plans the buckets of net's flat gradient buffer and requests the sums' buffers from the arena
  // (before its owner commits it).
  GradientSync(Arena& arena, const Net& net, int ranks, const GradSyncOptions& o);
  // Once the arena is committed: joins the NCCL communicator of every rank (collective) and takes the
  // flat gradient buffer the backward pass writes.
  void start(int rank, float* grads);

  // In a step, on the compute stream s, in this order: agree() once the forward pass has written the
  // step's verdict on its loss (StepScalars::nonfinite), which is all-reduced with max so that every
  // rank skips the step if one must; ready() for each range the backward pass completes
  // (GpuNet::backward's callback); then wait_for_comm() and finish().
  // With fp8 the same all-reduce agrees on each bucket's largest gradient of the step before, which
  // sets this step's scales (the first step, without one, agrees on each bucket's own as it goes).
  // int4 draws its rounding from the step's key (device memory, StepScalars::key), so that a run
  // repeats, and resumes, bit for bit.
  void agree(cudaStream_t s, uint32_t* nonfinite, const uint64_t* key = nullptr);
  void ready(cudaStream_t s, const FlatRange& r, const Update& update);
  // s waits for the last all-reduce.
  void wait_for_comm(cudaStream_t s);
  // The updates that are left (all of them, without bucket updates) follow on s, which waits for them.
  void finish(cudaStream_t s, const Update& update);

  // Between steps: rank 0's n floats at x (device memory) into every rank's x, on the comm stream
  // after what s queued so far; s waits for it. Collective: every rank calls it in the same order.
  void broadcast_from_first(cudaStream_t s, float* x, size_t n);

  // fp8, between steps (collective): every rank's largest gradients of the last step become the
  // ranks' maxima (what the next agree() would make of them), returned for a checkpoint; empty
  // before the first step and for other wires.
  std::vector<float> agreed_maxima(cudaStream_t s);
  // fp8, before the first step: the maxima a checkpoint holds, so that the first step scales as the
  // step after that checkpoint did. False (and nothing changed) where the bucket count differs.
  bool set_maxima(cudaStream_t s, const std::vector<float>& maxima);
  // fp8: the bucket-steps since the last call whose largest gradient was more than twice the step
  // before's (clipped there to that twice; waits for the comm stream).
  long long take_clipped();

  // Bytes each step puts on the wire, per rank (step_wire_bytes).
  double wire_bytes_per_step() const { return wire_bytes_; }
  const std::vector<FlatRange>& buckets() const { return buckets_; }

 private:
  void flush(cudaStream_t s, const FlatRange& b, const Update& update);
  void all_reduce_fp8(cudaStream_t c, const FlatRange& b);
  void all_reduce_int4(cudaStream_t c, const FlatRange& b);
  void all_reduce_fp8_int4(cudaStream_t c, const FlatRange& b);
  // fp8's scale of the bucket in hand: its agreed maximum (the first step's own, agreed on first).
  float* fp8_max(cudaStream_t c, const FlatRange& b);
  void request_int4(Arena& arena);
  void agree_fp8(cudaStream_t c, uint32_t* nonfinite);
  // Every wire but fp32 leaves the update bf16 sums to read (sums_); fp32 averages in place.
  bool sums_in_bf16() const { return o_.precision != GradComm::fp32; }
  Gradients gradients() const;

  GradSyncOptions o_;
  int ranks_, rank_ = 0;
  size_t params_;
  std::vector<FlatRange> buckets_;
  double wire_bytes_ = 0;
  std::unique_ptr<NcclComm> nccl_;
  float* grads_ = nullptr;
  DeviceBuffer<bf16> sums_;  // bf16 and fp8: the gradients' sums, in bf16 (bf16: summed in place)
  // fp8: each bucket's gradients scaled and rounded to e4m3, summed in place, then widened into sums_.
  // A bucket's scale follows from its maximum in scales_ (the largest magnitude on any rank); local_
  // gathers this rank's largest of the step for the next step's, which verdict_ agrees on with the
  // loss (slot 0; then a float's bits a bucket); clipped_ counts the buckets that outgrew theirs.
  DeviceBuffer<unsigned char> fp8_;
  DeviceBuffer<float> local_, scales_;
  DeviceBuffer<uint32_t> verdict_, clipped_;
  bool scaled_before_ = false;  // a step (or a checkpoint) has left maxima to scale by
  // int4: this rank's blocks of each chunk (send_), the blocks the others dealt it (recv_), and every
  // owner's summed chunk (all_, its own in place for the all-gather); the step's key. fp8_int4: the
  // bucket's e4m3 gradients padded to whole chunks in fp8_, and the owner's sums in fp32 (chunk_).
  DeviceBuffer<Int4Block> send_, recv_, all_;
  DeviceBuffer<float> chunk_;
  const uint64_t* key_ = nullptr;
  CudaStream comm_{CudaStream::Urgent{}}, update_;
  CudaEvent fork_, reduced_, comm_done_, updates_done_;
  size_t next_ = 0;  // the bucket the backward pass fills now
  FlatRange open_;   // its ranges so far
};

}  // namespace convoy::gpu
