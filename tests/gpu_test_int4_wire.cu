// The int4 wire's CUDA passes (int4_wire.cu) against their CPU reference (int4_wire.cpp), one GPU:
// for 4 ranks' gradients of a bucket that starts inside the flat buffer and is no whole number of
// chunks, each rank's dealt blocks and its summed chunk (and fp8_int4's rounded chunk of sums) match
// the reference byte for byte (the same
// draws from the key in device memory, the same rounded operations), and the widened sums are the
// reference's rounded to bf16, bit for bit; a non-finite gradient leaves its block's sums non-finite.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "bf16_host.h"
#include "train/cuda/gpu_context.h"
#include "train/int4_wire.h"

using namespace convoy;

namespace {

template <typename T>
struct DeviceArray {
  T* p = nullptr;
  explicit DeviceArray(size_t n) { CONVOY_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(1, n) * sizeof(T))); }
  DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) {
    CONVOY_CUDA_CHECK(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~DeviceArray() { cudaFree(p); }
  std::vector<T> get(size_t n) const {
    std::vector<T> h(n);
    CONVOY_CUDA_CHECK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
};

bool same_bytes(const std::vector<Int4Block>& a, const std::vector<Int4Block>& b, size_t from, size_t to) {
  return std::memcmp(a.data() + from, b.data() + from, (to - from) * sizeof(Int4Block)) == 0;
}

std::vector<float> gradients(int rank, size_t n) {
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i)
    g[i] = float(std::sin(0.61 * double(i) + rank) * std::pow(10.0, double(i % 5) / 2.0 - 3.0));
  return g;
}

}  // namespace

TEST(GpuInt4Wire, PassesMatchTheCpuReference) {
  const int ranks = 4;
  const size_t n = 70000;
  const FlatRange r{1000, 1000 + 60001};
  const uint64_t key = 0x1234567890abcdefull;
  const DeviceArray<uint64_t> dkey(std::vector<uint64_t>{key});
  const size_t blocks = int4_bucket(r, ranks, 0).blocks, all = size_t(ranks) * blocks;
  std::vector<std::vector<float>> g;
  std::vector<std::vector<Int4Block>> sent;
  for (int j = 0; j < ranks; ++j) {
    g.push_back(gradients(j, n));
    if (j == 2) g.back()[r.lo + 40] = std::nanf("");  // rank 2's second block
    const Int4Bucket b = int4_bucket(r, ranks, j);
    std::vector<Int4Block> cpu(all);
    int4_deal(b, g.back().data(), key, cpu.data());
    const DeviceArray<float> dg(g.back());
    const DeviceArray<Int4Block> dsend(cpu);  // its own chunk's place holds the same bytes on both
    gpu::int4_deal(nullptr, b, dg.p, dkey.p, dsend.p);
    const std::vector<Int4Block> gpu = dsend.get(all);
    EXPECT_TRUE(same_bytes(cpu, gpu, 0, all)) << "rank " << j;
    sent.push_back(cpu);
  }
  std::vector<Int4Block> cpu_all(all);
  for (int j = 0; j < ranks; ++j) {
    std::vector<Int4Block> recv(all);
    for (int i = 0; i < ranks; ++i)
      for (size_t k = 0; k < blocks; ++k) recv[size_t(i) * blocks + k] = sent[size_t(i)][size_t(j) * blocks + k];
    const Int4Bucket b = int4_bucket(r, ranks, j);
    int4_sum_own(b, g[size_t(j)].data(), recv.data(), key, cpu_all.data() + size_t(j) * blocks);
    const DeviceArray<float> dg(g[size_t(j)]);
    const DeviceArray<Int4Block> drecv(recv), dout(blocks);
    gpu::int4_sum_own(nullptr, b, dg.p, drecv.p, dkey.p, dout.p);
    const std::vector<Int4Block> gpu = dout.get(blocks);
    EXPECT_EQ(std::memcmp(gpu.data(), cpu_all.data() + size_t(j) * blocks, blocks * sizeof(Int4Block)), 0) << j;
  }
  {  // fp8_int4's owner: rank 3's chunk of sums (its gradients here) rounded alike on both
    const Int4Bucket b = int4_bucket(r, ranks, 3);
    std::vector<float> chunk(blocks * kInt4Block);
    for (size_t i = 0; i < chunk.size(); ++i) chunk[i] = g[0][i] * 3.f;
    std::vector<Int4Block> cpu(blocks);
    int4_round_chunk(b, chunk.data(), key, cpu.data());
    const DeviceArray<float> dx(chunk);
    const DeviceArray<Int4Block> dout(blocks);
    gpu::int4_round_chunk(nullptr, b, dx.p, dkey.p, dout.p);
    const std::vector<Int4Block> gpu = dout.get(blocks);
    EXPECT_EQ(std::memcmp(gpu.data(), cpu.data(), blocks * sizeof(Int4Block)), 0);
  }
  std::vector<float> sums(n, 0.f);
  int4_widen(int4_bucket(r, ranks, 1), cpu_all.data(), sums.data());
  const DeviceArray<Int4Block> dall(cpu_all);
  const DeviceArray<__nv_bfloat16> dsums(std::vector<__nv_bfloat16>(n, __float2bfloat16(-1.f)));
  gpu::int4_widen(nullptr, int4_bucket(r, ranks, 1), dall.p, dsums.p);
  CONVOY_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<__nv_bfloat16> got = dsums.get(n);
  size_t poisoned = 0;
  for (size_t i = 0; i < n; ++i) {
    uint16_t bits;
    std::memcpy(&bits, &got[i], 2);
    if (i < r.lo || i >= r.hi) {
      ASSERT_EQ(test::bf16_float(bits), -1.f) << i;  // outside the bucket: untouched
    } else if (!std::isfinite(sums[i])) {
      EXPECT_FALSE(std::isfinite(test::bf16_float(bits))) << i;
      ++poisoned;
    } else {
      ASSERT_EQ(bits, test::bf16_bits(sums[i])) << i;
    }
  }
  EXPECT_EQ(poisoned, kInt4Block);  // the NaN's block, and no other
}
