// GradientSync: a bucket is sent once the backward pass has queued its last range; its all-reduce
// waits on the comm stream for what the compute stream queued so far, and its update waits on the
// update stream for its all-reduce, so neither holds up the backward pass nor the next all-reduce.
#include "train/gradient_sync.h"

#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>

namespace convoy::gpu {
namespace {

__global__ void round_to_bf16(size_t lo, size_t hi, const float* __restrict__ g, bf16* __restrict__ out) {
  for (size_t i = lo + blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < hi; i += size_t(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16_rn(g[i]);
}

// fp8 on the wire: each rank's gradients times limit / max, rounded to e4m3, so that the ranks' sum
// stays within half of e4m3's largest value (448) and the ring's partial sums, rounded at every hop,
// never pass it. max is the bucket's largest magnitude on any rank (the same scale everywhere): the
// step before's, or the step's own on the first; a bucket without one (zeros so far) keeps scale 1.
// A gradient up to twice the step before's largest is sent as is; one beyond is clipped to that
// twice (cap = 2 x limit), so that no sum can pass 448 whatever the gradients do.
__device__ inline float fp8_scale(float max, float limit) { return max > 0 && isfinite(max) ? limit / max : 1.f; }

// The block's largest m into *dst (a non-negative float's bits, which order as unsigned).
__device__ inline void block_max_into(float m, unsigned* dst) {
  for (int off = 16; off > 0; off /= 2) m = fmaxf(m, __shfl_down_sync(0xffffffffu, m, off));
  __shared__ float warp_max[32];
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (unsigned w = 1; w < blockDim.x / 32; ++w) m = fmaxf(m, warp_max[w]);
  atomicMax(dst, __float_as_uint(m));
}

// The largest |g| of [lo, hi) into *local.
__global__ void bucket_max(size_t lo, size_t hi, const float* __restrict__ g, unsigned* __restrict__ local) {
  float m = 0;
  for (size_t i = lo + blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < hi; i += size_t(gridDim.x) * blockDim.x)
    m = fmaxf(m, fabsf(g[i]));
  block_max_into(m, local);
}

// Scales and rounds [lo, hi) by *max; with `local`, gathers the bucket's largest |g| there as well
// (for the next step's scale).
__global__ void scale_to_fp8(size_t lo, size_t hi, const float* __restrict__ g, const float* __restrict__ max,
                             float limit, unsigned* __restrict__ local, __nv_fp8_storage_t* __restrict__ out) {
  const float s = fp8_scale(*max, limit), cap = 2 * limit;
  float m = 0;
  for (size_t i = lo + blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < hi; i += size_t(gridDim.x) * blockDim.x) {
    m = fmaxf(m, fabsf(g[i]));
    out[i - lo] = __nv_cvt_float_to_fp8(fminf(fmaxf(g[i] * s, -cap), cap), __NV_SATFINITE, __NV_E4M3);
  }
  if (local) block_max_into(m, local);
}

// n sums of scaled e4m3 back to the gradients' scale, as bf16 (the update's) or fp32 (fp8_int4's chunk).
template <typename T>
__global__ void widen_fp8(size_t n, const __nv_fp8_storage_t* __restrict__ q, const float* __restrict__ max,
                          float limit, T* __restrict__ out) {
  const float inv = 1.f / fp8_scale(*max, limit);
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] = T(__half2float(__half(__nv_cvt_fp8_to_halfraw(q[i], __NV_E4M3))) * inv);
}

// Before the verdict's all-reduce: the loss's verdict and the step before's largest gradients, which
// the next step starts gathering afresh.
__global__ void pack_verdict(const uint32_t* __restrict__ nonfinite, float* __restrict__ local, int buckets,
                             uint32_t* __restrict__ verdict) {
  if (blockIdx.x == 0 && threadIdx.x == 0) verdict[0] = *nonfinite;
  for (int b = blockIdx.x * blockDim.x + threadIdx.x; b < buckets; b += gridDim.x * blockDim.x) {
    verdict[1 + b] = __float_as_uint(local[b]);
    local[b] = 0;
  }
}

// After it: the agreed verdict back, and each bucket's agreed maximum as its scale's, where it is a
// magnitude (a step of non-finite or zero gradients keeps the maximum before it). A bucket whose
// maximum more than doubled (or appeared) was clipped, or scaled without one: counted.
__global__ void unpack_verdict(const uint32_t* __restrict__ verdict, int buckets, uint32_t* __restrict__ nonfinite,
                               float* __restrict__ scales, uint32_t* __restrict__ clipped) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *nonfinite = verdict[0];
  for (int b = blockIdx.x * blockDim.x + threadIdx.x; b < buckets; b += gridDim.x * blockDim.x) {
    const float agreed = __uint_as_float(verdict[1 + b]), before = scales[b];
    if (!(agreed > 0) || !isfinite(agreed)) continue;
    if (agreed > 2 * before) atomicAdd(clipped, 1u);
    scales[b] = agreed;
  }
}

// What NCCL's e4m3 sums need: a GPU of compute capability 9.0 or newer and NCCL 2.24 or newer.
struct Fp8Wire {
  int major = 0, version = 0;
  bool ok() const { return major >= 9 && version >= 22400; }
};

Fp8Wire fp8_wire(int device) {
  Fp8Wire w;
  CONVOY_CUDA_CHECK(cudaDeviceGetAttribute(&w.major, cudaDevAttrComputeCapabilityMajor, device));
  CONVOY_NCCL_CHECK(ncclGetVersion(&w.version));
  return w;
}

void require_fp8_wire(int device) {
  const Fp8Wire w = fp8_wire(device);
  if (!w.ok())
    fail(
        "fp8 gradients on the wire (--grad-comm fp8, or a checkpoint that chose it) need a GPU of compute "
        "capability 9.0 or newer and NCCL 2.24 or newer (here " +
        std::to_string(w.major) + ".x and NCCL " + std::to_string(w.version) + ")");
}

size_t flat_param_count(const Net& net) {
  size_t n = 0;
  for (const FlatRange& r : backward_ranges(net.nodes())) n = std::max(n, r.hi);
  return n;
}

}  // namespace

bool fp8_wire_supported(int device) { return fp8_wire(device).ok(); }

GradientSync::GradientSync(Arena& arena, const Net& net, int ranks, const GradSyncOptions& o)
    : o_(o), ranks_(ranks), params_(flat_param_count(net)) {
  // Buckets are cut by their fp32 gradients' bytes, whatever goes on the wire: in bf16 they carry
  // as many gradients in half the bytes (measured best on a slow link, docs/PERFORMANCE.md).
  buckets_ = plan_buckets(backward_ranges(net.nodes()), sizeof(float), o.bucket_bytes);
  // Bucket updates leave alone what no bucket holds: every parameter must be in one.
  size_t covered = 0;
  for (const FlatRange& b : buckets_) covered += b.size();
  if (covered != params_) fail("GradientSync: the net's parameter ranges do not cover its flat buffer");
  wire_bytes_ = int4_blocks(o.precision) ? int4_step_wire_bytes(buckets_, ranks, o.precision == GradComm::fp8_int4)
                                         : step_wire_bytes(buckets_, grad_comm_elem_bytes(o.precision), ranks,
                                                           grad_comm_scale_bytes(o.precision));
  if (sums_in_bf16()) arena.request(sums_, std::max<size_t>(1, params_));
  if (int4_blocks(o.precision)) request_int4(arena);
  if (!scaled_fp8(o.precision)) return;
  if (o.precision == GradComm::fp8) arena.request(fp8_, std::max<size_t>(1, params_));
  arena.request(local_, std::max<size_t>(1, buckets_.size()));
  arena.request(scales_, std::max<size_t>(1, buckets_.size()));
  arena.request(verdict_, 1 + buckets_.size());
  arena.request(clipped_, 1);
}

// Blocks for the largest bucket's chunks: every owner's (all_), and int4's dealt and received ones or
// fp8_int4's padded e4m3 gradients and the owner's fp32 sums.
void GradientSync::request_int4(Arena& arena) {
  size_t blocks = 1;
  for (const FlatRange& r : buckets_) blocks = std::max(blocks, int4_bucket(r, ranks_, 0).blocks);
  arena.request(all_, size_t(ranks_) * blocks);
  if (o_.precision == GradComm::fp8_int4) {
    arena.request(fp8_, size_t(ranks_) * blocks * kInt4Block);
    arena.request(chunk_, blocks * kInt4Block);
    return;
  }
  arena.request(send_, size_t(ranks_) * blocks);
  arena.request(recv_, size_t(ranks_) * blocks);
}

void GradientSync::start(int rank, float* grads) {
  if (scaled_fp8(o_.precision)) {
    int device = 0;
    CONVOY_CUDA_CHECK(cudaGetDevice(&device));
    require_fp8_wire(device);
    // No maxima yet (the arena is not cleared); on the comm stream, which reads them, as every change
    // to them below (the streams do not wait for the default one).
    cudaStream_t c = comm_.get();
    CONVOY_CUDA_CHECK(cudaMemsetAsync(local_.get(), 0, local_.size() * sizeof(float), c));
    CONVOY_CUDA_CHECK(cudaMemsetAsync(scales_.get(), 0, scales_.size() * sizeof(float), c));
    CONVOY_CUDA_CHECK(cudaMemsetAsync(clipped_.get(), 0, sizeof(uint32_t), c));
    CONVOY_CUDA_CHECK(cudaStreamSynchronize(c));
  }
  nccl_ = std::make_unique<NcclComm>(rank, ranks_);
  rank_ = rank;
  grads_ = grads;
}

Gradients GradientSync::gradients() const {
  if (sums_in_bf16()) return {nullptr, sums_.get(), ranks_};
  return {grads_, nullptr, 1};  // averaged in place by ncclAvg
}

void GradientSync::agree(cudaStream_t s, uint32_t* nonfinite, const uint64_t* key) {
  if (int4_blocks(o_.precision) && !key) fail("GradientSync: int4 on the wire needs the step's key");
  key_ = key;
  CONVOY_CUDA_CHECK(cudaEventRecord(fork_.get(), s));
  CONVOY_CUDA_CHECK(cudaStreamWaitEvent(comm_.get(), fork_.get(), 0));
  if (scaled_fp8(o_.precision))
    agree_fp8(comm_.get(), nonfinite);
  else
    CONVOY_NCCL_CHECK(ncclAllReduce(nonfinite, nonfinite, 1, ncclUint32, ncclMax, nccl_->get(), comm_.get()));
  next_ = 0;
  open_ = {};
}

// One all-reduce (max, as unsigned: the maxima are non-negative floats) for the verdict and every
// bucket's maximum, instead of one small all-reduce a bucket before its gradients could go: across
// hosts each costs a round trip on the link while the backward pass waits behind it.
void GradientSync::agree_fp8(cudaStream_t c, uint32_t* nonfinite) {
  const int b = int(buckets_.size());
  pack_verdict<<<1, 256, 0, c>>>(nonfinite, local_.get(), b, verdict_.get());
  CONVOY_CUDA_CHECK_LAUNCH();
  CONVOY_NCCL_CHECK(ncclAllReduce(verdict_.get(), verdict_.get(), 1 + b, ncclUint32, ncclMax, nccl_->get(), c));
  unpack_verdict<<<1, 256, 0, c>>>(verdict_.get(), b, nonfinite, scales_.get(), clipped_.get());
  CONVOY_CUDA_CHECK_LAUNCH();
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
  if (o_.precision == GradComm::fp8) {
    all_reduce_fp8(c, b);
  } else if (o_.precision == GradComm::int4) {
    all_reduce_int4(c, b);
  } else if (o_.precision == GradComm::fp8_int4) {
    all_reduce_fp8_int4(c, b);
  } else if (o_.precision == GradComm::bf16) {
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

// A bucket's fp8 scale is the step before's agreed maximum; on the first step, the bucket's own,
// all-reduced first.
float* GradientSync::fp8_max(cudaStream_t c, const FlatRange& b) {
  float* max = scales_.get() + next_;
  if (scaled_before_) return max;
  auto* local = reinterpret_cast<unsigned*>(local_.get() + next_);
  bucket_max<<<std::min(grid_for(b.size()), 1024u), 256, 0, c>>>(b.lo, b.hi, grads_, local);
  CONVOY_CUDA_CHECK_LAUNCH();
  CONVOY_CUDA_CHECK(cudaMemcpyAsync(max, local, sizeof(float), cudaMemcpyDeviceToDevice, c));
  CONVOY_NCCL_CHECK(ncclAllReduce(max, max, 1, ncclFloat, ncclMax, nccl_->get(), c));
  return max;
}

// The scaled e4m3 gradients are summed in place, then widened into the bf16 sums the update reads
// (it divides by the ranks), so that the updates are those of bf16 on the wire.
void GradientSync::all_reduce_fp8(cudaStream_t c, const FlatRange& b) {
  float* max = fp8_max(c, b);
  auto* local = reinterpret_cast<unsigned*>(local_.get() + next_);
  auto* q = reinterpret_cast<__nv_fp8_storage_t*>(fp8_.get()) + b.lo;
  const float limit = 224.f / float(ranks_);
  const unsigned grid = grid_for(b.size());
  scale_to_fp8<<<grid, 256, 0, c>>>(b.lo, b.hi, grads_, max, limit, scaled_before_ ? local : nullptr, q);
  CONVOY_CUDA_CHECK_LAUNCH();
  CONVOY_NCCL_CHECK(ncclAllReduce(q, q, b.size(), ncclFloat8e4m3, ncclSum, nccl_->get(), c));
  widen_fp8<<<grid, 256, 0, c>>>(b.size(), q, max, limit, sums_.get() + b.lo);
  CONVOY_CUDA_CHECK_LAUNCH();
}

// fp8's first half and int4's second: the scaled e4m3 gradients, padded with zeros to whole chunks,
// reduce-scattered (each rank the e4m3 sums of its chunk, by NCCL's ring as fp8's all-reduce sums
// them), widened to fp32, rounded to int4 blocks and all-gathered; a byte a gradient there and
// 0.5625 back, where fp8 sends a byte both ways and int4's way there is an all-to-all.
void GradientSync::all_reduce_fp8_int4(cudaStream_t c, const FlatRange& r) {
  float* max = fp8_max(c, r);
  auto* local = reinterpret_cast<unsigned*>(local_.get() + next_);
  const Int4Bucket b = int4_bucket(r, ranks_, rank_);
  const size_t chunk = b.blocks * kInt4Block, padded = size_t(ranks_) * chunk;
  auto* q = reinterpret_cast<__nv_fp8_storage_t*>(fp8_.get());
  const float limit = 224.f / float(ranks_);
  scale_to_fp8<<<grid_for(r.size()), 256, 0, c>>>(r.lo, r.hi, grads_, max, limit, scaled_before_ ? local : nullptr, q);
  CONVOY_CUDA_CHECK_LAUNCH();
  CONVOY_CUDA_CHECK(cudaMemsetAsync(q + r.size(), 0, padded - r.size(), c));
  __nv_fp8_storage_t* own = q + size_t(rank_) * chunk;
  CONVOY_NCCL_CHECK(ncclReduceScatter(q, own, chunk, ncclFloat8e4m3, ncclSum, nccl_->get(), c));
  widen_fp8<<<grid_for(chunk), 256, 0, c>>>(chunk, own, max, limit, chunk_.get());
  CONVOY_CUDA_CHECK_LAUNCH();
  Int4Block* blocks = all_.get() + size_t(rank_) * b.blocks;
  int4_round_chunk(c, b, chunk_.get(), key_, blocks);
  CONVOY_NCCL_CHECK(ncclAllGather(blocks, all_.get(), b.chunk_bytes(), ncclUint8, nccl_->get(), c));
  int4_widen(c, b, all_.get(), sums_.get());
}

// Each rank deals every other its chunk's gradients as 4-bit blocks (the all-to-all: a send and a
// receive a peer, grouped), sums its own chunk from its fp32 gradients and what it was dealt, rounds
// the sum to blocks again, and the all-gather hands every rank every owner's; all widen the same
// blocks into the bf16 sums the update reads, so every rank takes the same step.
void GradientSync::all_reduce_int4(cudaStream_t c, const FlatRange& r) {
  const Int4Bucket b = int4_bucket(r, ranks_, rank_);
  const size_t bytes = b.chunk_bytes();
  Int4Block *send = send_.get(), *recv = recv_.get(), *own = all_.get() + size_t(rank_) * b.blocks;
  int4_deal(c, b, grads_, key_, send);
  CONVOY_NCCL_CHECK(ncclGroupStart());
  for (int j = 0; j < ranks_; ++j) {
    if (j == rank_) continue;
    CONVOY_NCCL_CHECK(ncclSend(send + size_t(j) * b.blocks, bytes, ncclUint8, j, nccl_->get(), c));
    CONVOY_NCCL_CHECK(ncclRecv(recv + size_t(j) * b.blocks, bytes, ncclUint8, j, nccl_->get(), c));
  }
  CONVOY_NCCL_CHECK(ncclGroupEnd());
  int4_sum_own(c, b, grads_, recv, key_, own);
  CONVOY_NCCL_CHECK(ncclAllGather(own, all_.get(), bytes, ncclUint8, nccl_->get(), c));
  int4_widen(c, b, all_.get(), sums_.get());
}

std::vector<float> GradientSync::agreed_maxima(cudaStream_t s) {
  if (!scaled_fp8(o_.precision) || !scaled_before_) return {};
  CONVOY_CUDA_CHECK(cudaEventRecord(fork_.get(), s));
  CONVOY_CUDA_CHECK(cudaStreamWaitEvent(comm_.get(), fork_.get(), 0));
  float* local = local_.get();
  CONVOY_NCCL_CHECK(ncclAllReduce(local, local, buckets_.size(), ncclFloat, ncclMax, nccl_->get(), comm_.get()));
  CONVOY_CUDA_CHECK(cudaStreamSynchronize(comm_.get()));
  std::vector<float> m(buckets_.size());
  local_.download(m.data(), m.size());
  return m;
}

bool GradientSync::set_maxima(cudaStream_t s, const std::vector<float>& maxima) {
  if (!scaled_fp8(o_.precision) || maxima.size() != buckets_.size()) return false;
  // As the step before left them: gathered (local_) and scaled by (scales_), so that none counts as
  // clipped.
  cudaStream_t c = comm_.get();
  CONVOY_CUDA_CHECK(cudaStreamSynchronize(s));
  const size_t bytes = maxima.size() * sizeof(float);
  CONVOY_CUDA_CHECK(cudaMemcpyAsync(local_.get(), maxima.data(), bytes, cudaMemcpyHostToDevice, c));
  CONVOY_CUDA_CHECK(cudaMemcpyAsync(scales_.get(), maxima.data(), bytes, cudaMemcpyHostToDevice, c));
  CONVOY_CUDA_CHECK(cudaStreamSynchronize(c));
  scaled_before_ = true;
  return true;
}

long long GradientSync::take_clipped() {
  if (!scaled_fp8(o_.precision)) return 0;
  CONVOY_CUDA_CHECK(cudaStreamSynchronize(comm_.get()));
  uint32_t n = 0;
  clipped_.download(&n, 1);
  CONVOY_CUDA_CHECK(cudaMemsetAsync(clipped_.get(), 0, sizeof(uint32_t), comm_.get()));
  return n;
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
  scaled_before_ = true;  // the next step scales by this one's maxima
  CONVOY_CUDA_CHECK(cudaEventRecord(comm_done_.get(), comm_.get()));
  CONVOY_CUDA_CHECK(cudaStreamWaitEvent(s, comm_done_.get(), 0));
}

void GradientSync::finish(cudaStream_t s, const Update& update) {
  if (!o_.bucket_updates) return update({0, params_, s}, gradients());
  CONVOY_CUDA_CHECK(cudaEventRecord(updates_done_.get(), update_.get()));
  CONVOY_CUDA_CHECK(cudaStreamWaitEvent(s, updates_done_.get(), 0));
}

}  // namespace convoy::gpu
