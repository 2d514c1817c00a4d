// The int4 wire's CUDA twin (int4_wire.h): a warp a block, a lane a gradient, the block's largest
// magnitude shared by shuffles and two lanes' codes to a byte; the same draws and rounded operations
// as the CPU reference, so that both make the same blocks.
#include "shared/cuda_check.h"
#include "train/cuda/gpu_context.h"
#include "train/int4_wire.h"

namespace convoy::gpu {
namespace {

static_assert(kInt4Block == 32, "a warp a block");
constexpr unsigned kWarps = 8;  // blocks a CUDA block handles at once

__device__ inline unsigned lane() { return threadIdx.x % 32; }

// The lane's gradient of block t of the bucket (t counts over every chunk), zero past its end.
__device__ inline float gradient_of(const Int4Bucket& b, const float* __restrict__ g, size_t t) {
  const size_t e = b.lo + t * kInt4Block + lane();
  return e < b.lo + b.n ? g[e] : 0.f;
}

// The warp's values rounded into one block (every lane of the warp calls it).
__device__ void round_block(float x, uint64_t key, uint64_t stream, uint64_t first, Int4Block* __restrict__ out) {
  float max = int4_magnitude(x);
  for (int off = 16; off > 0; off /= 2) max = fmaxf(max, __shfl_xor_sync(0xffffffffu, max, off));
  const uint16_t scale = int4_scale_bits(max);
  const unsigned code = int4_code(x, int4_inverse(int4_scale(scale)), counter_uniform(key, stream, first + lane()));
  const unsigned next = __shfl_down_sync(0xffffffffu, code, 1);
  if (lane() % 2 == 0) out->q[lane() / 2] = uint8_t(code | (next << 4));
  if (lane() == 0) out->scale = scale;
}

// Grid-stride over warps.
__device__ inline size_t first_warp() { return blockIdx.x * size_t(kWarps) + threadIdx.x / 32; }
__device__ inline size_t warp_stride() { return size_t(gridDim.x) * kWarps; }

__global__ void deal(Int4Bucket b, const float* __restrict__ g, const uint64_t* __restrict__ key,
                     Int4Block* __restrict__ send) {
  const size_t blocks = size_t(b.ranks) * b.blocks;
  for (size_t t = first_warp(); t < blocks; t += warp_stride()) {
    if (t / b.blocks == size_t(b.rank)) continue;
    round_block(gradient_of(b, g, t), *key, int4_stream(b.rank, 0), b.lo + t * kInt4Block, send + t);
  }
}

__global__ void sum_own(Int4Bucket b, const float* __restrict__ g, const Int4Block* __restrict__ recv,
                        const uint64_t* __restrict__ key, Int4Block* __restrict__ out) {
  for (size_t k = first_warp(); k < b.blocks; k += warp_stride()) {
    const size_t t = size_t(b.rank) * b.blocks + k;
    float x = gradient_of(b, g, t);
    for (int j = 0; j < b.ranks; ++j)
      if (j != b.rank) x = __fadd_rn(x, int4_value(recv[size_t(j) * b.blocks + k], lane()));
    round_block(x, *key, int4_stream(b.rank, 1), b.lo + t * kInt4Block, out + k);
  }
}

__global__ void round_chunk(Int4Bucket b, const float* __restrict__ x, const uint64_t* __restrict__ key,
                            Int4Block* __restrict__ out) {
  for (size_t k = first_warp(); k < b.blocks; k += warp_stride()) {
    const size_t t = size_t(b.rank) * b.blocks + k;
    round_block(x[k * kInt4Block + lane()], *key, int4_stream(b.rank, 1), b.lo + t * kInt4Block, out + k);
  }
}

__global__ void widen(Int4Bucket b, const Int4Block* __restrict__ all, __nv_bfloat16* __restrict__ sums) {
  const size_t blocks = size_t(b.ranks) * b.blocks;
  for (size_t t = first_warp(); t < blocks; t += warp_stride()) {
    const size_t e = b.lo + t * kInt4Block + lane();
    if (e < b.lo + b.n) sums[e] = __float2bfloat16_rn(int4_value(all[t], lane()));
  }
}

unsigned grid_of(size_t blocks) {
  return unsigned(std::min<size_t>(4096, std::max<size_t>(1, (blocks + kWarps - 1) / kWarps)));
}

}  // namespace

void int4_deal(cudaStream_t s, const Int4Bucket& b, const float* g, const uint64_t* key, Int4Block* send) {
  deal<<<grid_of(size_t(b.ranks) * b.blocks), 32 * kWarps, 0, s>>>(b, g, key, send);
  CONVOY_CUDA_CHECK_LAUNCH();
}

void int4_sum_own(cudaStream_t s, const Int4Bucket& b, const float* g, const Int4Block* recv, const uint64_t* key,
                  Int4Block* out) {
  sum_own<<<grid_of(b.blocks), 32 * kWarps, 0, s>>>(b, g, recv, key, out);
  CONVOY_CUDA_CHECK_LAUNCH();
}

void int4_round_chunk(cudaStream_t s, const Int4Bucket& b, const float* x, const uint64_t* key, Int4Block* out) {
  round_chunk<<<grid_of(b.blocks), 32 * kWarps, 0, s>>>(b, x, key, out);
  CONVOY_CUDA_CHECK_LAUNCH();
}

void int4_widen(cudaStream_t s, const Int4Bucket& b, const Int4Block* all, __nv_bfloat16* sums) {
  widen<<<grid_of(size_t(b.ranks) * b.blocks), 32 * kWarps, 0, s>>>(b, all, sums);
  CONVOY_CUDA_CHECK_LAUNCH();
}

}  // namespace convoy::gpu
