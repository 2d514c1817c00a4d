// The CUDA resizer: a batch of staged images goes up in one copy, is resized by one launch (one
// block row per image, one thread per output pixel) and comes back in one copy, on its own stream.
#include <cuda_runtime.h>

#include <cstring>
#include <string>

#include "datagen/gpu_resize.h"
#include "shared/cuda_owners.h"
#include "shared/error.h"
#include "shared/timer.h"

namespace convoy::datagen {

namespace {

constexpr int kTileW = 32, kTileH = 8;  // one warp per output row segment
constexpr size_t kAlign = 256;          // staged images start on cache-line multiples

size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

__device__ unsigned warp_sum(unsigned v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}

// One output pixel per thread, then (optionally) the block's per-channel sums added to its image's.
template <int CN>
__device__ void resize_tile(const ResizeJob& job, const uint8_t* __restrict__ in, uint8_t* __restrict__ out, int size,
                            ChannelSums* sums, unsigned* block_sum, unsigned* block_sq) {
  const int t = threadIdx.y * kTileW + threadIdx.x;
  const int tiles_x = (size + kTileW - 1) / kTileW;
  const int x = (blockIdx.x % tiles_x) * kTileW + threadIdx.x;
  const int y = (blockIdx.x / tiles_x) * kTileH + threadIdx.y;
  uint8_t v[CN] = {};
  if (x < size && y < size) {
    resize_pixel_cn<CN>(job, in + job.src_offset, x, y, v);
    uint8_t* o = out + job.dst_offset + (static_cast<size_t>(y) * size + x) * CN;
#pragma unroll
    for (int c = 0; c < CN; ++c) o[c] = v[c];
  }
  if (sums == nullptr) return;
    // A block is at most 256 pixels, so 32-bit partial sums of squares (<= 256 * 255^2) cannot wrap.
#pragma unroll
  for (int c = 0; c < CN; ++c) {
    const unsigned s = warp_sum(v[c]);
    const unsigned q = warp_sum(static_cast<unsigned>(v[c]) * v[c]);
    if ((t & 31) == 0) {
      atomicAdd(&block_sum[c], s);
      atomicAdd(&block_sq[c], q);
    }
  }
  __syncthreads();
  if (t < CN) {
    atomicAdd(reinterpret_cast<unsigned long long*>(&sums[blockIdx.y].sum[t]),
              static_cast<unsigned long long>(block_sum[t]));
    atomicAdd(reinterpret_cast<unsigned long long*>(&sums[blockIdx.y].sum_sq[t]),
              static_cast<unsigned long long>(block_sq[t]));
  }
}

// Grid: x = output tiles of one image, y = image of the batch.
__global__ void resize_kernel(const ResizeJob* __restrict__ jobs, const uint8_t* __restrict__ in,
                              uint8_t* __restrict__ out, int size, ChannelSums* sums) {
  __shared__ ResizeJob job;
  __shared__ unsigned block_sum[4], block_sq[4];
  const int t = threadIdx.y * kTileW + threadIdx.x;
  if (t == 0) job = jobs[blockIdx.y];
  if (t < 4) block_sum[t] = block_sq[t] = 0;
  __syncthreads();
  switch (job.channels) {  // the same for the whole block, so no divergence
    case 1: resize_tile<1>(job, in, out, size, sums, block_sum, block_sq); break;
    case 2: resize_tile<2>(job, in, out, size, sums, block_sum, block_sq); break;
    case 3: resize_tile<3>(job, in, out, size, sums, block_sum, block_sq); break;
    case 4: resize_tile<4>(job, in, out, size, sums, block_sum, block_sq); break;
  }
}

// Makes the resizer's device current for the calling thread; members that allocate are built after it.
struct DeviceSelect {
  explicit DeviceSelect(int device) {
    const int n = gpu_resize_device_count();
    if (n == 0) fail("--gpu-resize: no CUDA device is available (no driver or no GPU)");
    if (device < 0 || device >= n)
      fail("--gpu-resize: device " + std::to_string(device) + " does not exist (" + std::to_string(n) + " present)");
    CONVOY_CUDA_CHECK(cudaSetDevice(device));
  }
};

}  // namespace

struct GpuResizer::Impl {
  explicit Impl(const GpuResizeOptions& o)
      : opt(o), select(o.device), out_bytes(static_cast<size_t>(o.size) * o.size * o.channels),
        in_host(align_up(o.staging_bytes)), in_dev(align_up(o.staging_bytes)),
        jobs_host(sizeof(ResizeJob) * o.max_images), jobs_dev(sizeof(ResizeJob) * o.max_images),
        out_host(out_bytes * o.max_images), out_dev(out_bytes * o.max_images),
        sums_host(o.channel_sums ? sizeof(ChannelSums) * o.max_images : 0),
        sums_dev(o.channel_sums ? sizeof(ChannelSums) * o.max_images : 0) {}

  enum class State { filling, in_flight, done };

  void use_device() const { CONVOY_CUDA_CHECK(cudaSetDevice(opt.device)); }
  ResizeJob* jobs() const { return reinterpret_cast<ResizeJob*>(jobs_host.data()); }

  // Starts a new batch if the previous one was submitted; the previous outputs are then gone.
  void begin_filling(GpuResizer& self) {
    if (state == State::in_flight) self.wait();
    if (state == State::done) {
      count = 0;
      used = 0;
      state = State::filling;
    }
  }

  // Reserves room for one image and records its job; nullptr when the batch is full.
  uint8_t* reserve(int width, int height) {
    if (count == opt.max_images) return nullptr;
    if (width <= 0 || height <= 0) fail("--gpu-resize: empty image");
    const size_t bytes = static_cast<size_t>(width) * height * opt.channels;
    const size_t offset = used;
    if (offset + bytes > in_host.size()) {
      if (count > 0) return nullptr;
      // A single image larger than the staging buffer: grow both copies of it.
      in_host = PinnedBuffer();
      in_dev = DeviceBuffer();
      in_host = PinnedBuffer(align_up(bytes));
      in_dev = DeviceBuffer(align_up(bytes));
    }
    ResizeJob j = plan_resize_job(width, height, opt.channels, static_cast<size_t>(width) * opt.channels, opt.size,
                                  opt.policy);
    j.src_offset += offset;
    j.dst_offset = out_bytes * count;
    jobs()[count++] = j;
    used = align_up(offset + bytes);
    return in_host.data() + offset;
  }

  GpuResizeOptions opt;
  DeviceSelect select;
  size_t out_bytes;
  CudaStream stream;
  CudaEvent ev_start, ev_uploaded, ev_resized, ev_downloaded;
  PinnedBuffer in_host;
  DeviceBuffer in_dev;
  PinnedBuffer jobs_host;
  DeviceBuffer jobs_dev;
  PinnedBuffer out_host;
  DeviceBuffer out_dev;
  PinnedBuffer sums_host;
  DeviceBuffer sums_dev;
  State state = State::filling;
  int count = 0;
  size_t used = 0;  // staged bytes, including alignment padding
  GpuResizeTimes times;
};

namespace {
GpuResizeOptions checked(const GpuResizeOptions& o) {
  if (o.size <= 0) fail("--gpu-resize: the sample size must be positive");
  if (o.channels != 1 && o.channels != 3) fail("--gpu-resize: channels must be 1 or 3");
  if (o.max_images <= 0 || o.max_images > 65535) fail("--gpu-resize: images per batch must be 1..65535");
  // Rejects policy short with the same message as the CPU path, before anything is allocated.
  plan_resize_job(1, 1, o.channels, o.channels, o.size, o.policy);
  return o;
}
}  // namespace

GpuResizer::GpuResizer(const GpuResizeOptions& options) : impl_(new Impl(checked(options))) {}
GpuResizer::~GpuResizer() {
  if (!impl_) return;
  // The buffers belong to this resizer's device, and the stream may still be writing into pinned
  // memory that is about to be freed.
  bool ok = cudaSetDevice(impl_->opt.device) == cudaSuccess;
  if (ok && impl_->state == Impl::State::in_flight) ok = cudaStreamSynchronize(impl_->stream.get()) == cudaSuccess;
  if (!ok) cudaGetLastError();
}

uint8_t* GpuResizer::stage(int width, int height) {
  impl_->begin_filling(*this);
  impl_->use_device();
  return impl_->reserve(width, height);
}

bool GpuResizer::add(const uint8_t* pixels, size_t row_stride, int width, int height) {
  uint8_t* dst = stage(width, height);
  if (dst == nullptr) return false;
  Stopwatch sw;
  const size_t row = static_cast<size_t>(width) * impl_->opt.channels;
  if (row_stride == row) {
    std::memcpy(dst, pixels, row * height);
  } else {
    for (int y = 0; y < height; ++y) std::memcpy(dst + row * y, pixels + row_stride * y, row);
  }
  impl_->times.stage_s += sw.seconds();
  return true;
}

int GpuResizer::count() const { return impl_->count; }
int GpuResizer::device() const { return impl_->opt.device; }
const GpuResizeTimes& GpuResizer::times() const { return impl_->times; }

void GpuResizer::submit() {
  Impl& m = *impl_;
  if (m.state != Impl::State::filling || m.count == 0) return;
  m.use_device();
  cudaStream_t s = m.stream.get();
  const size_t jobs_bytes = sizeof(ResizeJob) * m.count;
  const size_t out_bytes = m.out_bytes * m.count;
  CONVOY_CUDA_CHECK(cudaEventRecord(m.ev_start.get(), s));
  CONVOY_CUDA_CHECK(cudaMemcpyAsync(m.jobs_dev.data(), m.jobs_host.data(), jobs_bytes, cudaMemcpyHostToDevice, s));
  CONVOY_CUDA_CHECK(cudaMemcpyAsync(m.in_dev.data(), m.in_host.data(), m.used, cudaMemcpyHostToDevice, s));
  CONVOY_CUDA_CHECK(cudaEventRecord(m.ev_uploaded.get(), s));
  ChannelSums* sums = nullptr;
  if (m.opt.channel_sums) {
    sums = reinterpret_cast<ChannelSums*>(m.sums_dev.data());
    CONVOY_CUDA_CHECK(cudaMemsetAsync(sums, 0, sizeof(ChannelSums) * m.count, s));
  }
  const int tiles = ((m.opt.size + kTileW - 1) / kTileW) * ((m.opt.size + kTileH - 1) / kTileH);
  resize_kernel<<<dim3(tiles, m.count), dim3(kTileW, kTileH), 0, s>>>(
      reinterpret_cast<const ResizeJob*>(m.jobs_dev.data()), m.in_dev.data(), m.out_dev.data(), m.opt.size, sums);
  CONVOY_CUDA_CHECK(cudaGetLastError());
  CONVOY_CUDA_CHECK(cudaEventRecord(m.ev_resized.get(), s));
  CONVOY_CUDA_CHECK(cudaMemcpyAsync(m.out_host.data(), m.out_dev.data(), out_bytes, cudaMemcpyDeviceToHost, s));
  if (sums)
    CONVOY_CUDA_CHECK(
        cudaMemcpyAsync(m.sums_host.data(), sums, sizeof(ChannelSums) * m.count, cudaMemcpyDeviceToHost, s));
  CONVOY_CUDA_CHECK(cudaEventRecord(m.ev_downloaded.get(), s));
  m.times.bytes_up += jobs_bytes + m.used;
  m.times.bytes_down += out_bytes + (sums ? sizeof(ChannelSums) * m.count : 0);
  m.state = Impl::State::in_flight;
}

void GpuResizer::wait() {
  Impl& m = *impl_;
  if (m.state != Impl::State::in_flight) return;
  m.use_device();
  Stopwatch sw;
  CONVOY_CUDA_CHECK(cudaEventSynchronize(m.ev_downloaded.get()));
  m.times.wait_s += sw.seconds();
  float up = 0, kernel = 0, down = 0;
  CONVOY_CUDA_CHECK(cudaEventElapsedTime(&up, m.ev_start.get(), m.ev_uploaded.get()));
  CONVOY_CUDA_CHECK(cudaEventElapsedTime(&kernel, m.ev_uploaded.get(), m.ev_resized.get()));
  CONVOY_CUDA_CHECK(cudaEventElapsedTime(&down, m.ev_resized.get(), m.ev_downloaded.get()));
  m.times.upload_s += up * 1e-3;
  m.times.kernel_s += kernel * 1e-3;
  m.times.download_s += down * 1e-3;
  m.times.images += m.count;
  m.times.batches += 1;
  m.state = Impl::State::done;
}

const uint8_t* GpuResizer::output(int i) const {
  if (impl_->state != Impl::State::done || i < 0 || i >= impl_->count)
    fail("internal: GPU resize output " + std::to_string(i) + " read before wait() or out of range");
  return impl_->out_host.data() + impl_->out_bytes * i;
}

const ChannelSums& GpuResizer::sums(int i) const {
  if (!impl_->opt.channel_sums) fail("internal: GPU channel sums read without channel_sums set");
  if (impl_->state != Impl::State::done || i < 0 || i >= impl_->count)
    fail("internal: GPU channel sums " + std::to_string(i) + " read before wait() or out of range");
  return reinterpret_cast<const ChannelSums*>(impl_->sums_host.data())[i];
}

bool gpu_resize_built() { return true; }

int gpu_resize_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // a missing driver is "no devices", not an error
    return 0;
  }
  return n;
}

}  // namespace convoy::datagen
