// bf16 NHWC batch normalisation with own kernels: per-channel statistics summed in fp32 and
// finished in double (channels.cuh, a fixed order), normalisation in fp32, one rounding per
// stored value. The saved statistics (mean, 1/sqrt(var + eps)) and the unbiased running-variance
// update are batchnorm.cpp's. Own kernels rather than cuDNN's batch-norm calls (deprecated in cuDNN
// 9; PyTorch keeps bf16 batch norm off them too): every sum has a fixed order, so the step's graph
// replays bit for bit, and the passes move 16-byte packs of channels.
#include <cmath>

#include "train/layers/channels.cuh"
#include "train/layers/gpu_ops.h"
#include "train/layers/storage.cuh"

namespace convoy::gpu {
namespace {

struct MomentTerms {
  const bf16* x;
  int c;
  __device__ void begin(int) {}
  __device__ float2 operator()(long long r, int ch) const {
    const float v = load(x[size_t(r) * c + ch]);
    return make_float2(v, v * v);
  }
};

// Mean and variance from the sums, the saved and running statistics, and y = x * scale + shift.
struct FinishMoments {
  long long count;
  float eps, momentum;
  const float *gamma, *beta;
  float *save_mean, *save_invstd, *running_mean, *running_var;
  float2* scale_shift;
  __device__ void operator()(int ch, double sum, double sq) const {
    const double mean = sum / count;
    const double var = fmax(0.0, sq / count - mean * mean);
    const float invstd = float(1.0 / sqrt(var + eps));
    save_mean[ch] = float(mean);
    save_invstd[ch] = invstd;
    const double unbiased = count > 1 ? var * count / (count - 1) : var;
    running_mean[ch] = (1 - momentum) * running_mean[ch] + momentum * float(mean);
    running_var[ch] = (1 - momentum) * running_var[ch] + momentum * float(unbiased);
    const float a = gamma[ch] * invstd;
    scale_shift[ch] = make_float2(a, beta[ch] - float(mean) * a);
  }
};

struct GradTerms {
  const bf16 *x, *dy;
  const float *mean, *invstd;
  int c;
  float m = 0, k = 0;
  __device__ void begin(int ch) {
    m = mean[ch];
    k = invstd[ch];
  }
  __device__ float2 operator()(long long r, int ch) const {
    const size_t i = size_t(r) * c + ch;
    const float g = load(dy[i]);
    return make_float2(g, g * (load(x[i]) - m) * k);
  }
};

// dgamma, dbeta, and the per-channel factors of dx = k * (dy - mean(dy) - xhat * mean(dy * xhat)).
struct FinishGrad {
  long long count;
  const float *gamma, *invstd;
  float *dgamma, *dbeta;
  float4* factors;  // k, mean(dy), mean(dy * xhat)
  __device__ void operator()(int ch, double sdy, double sdy_xhat) const {
    dgamma[ch] = float(sdy_xhat);
    dbeta[ch] = float(sdy);
    factors[ch] = make_float4(gamma[ch] * invstd[ch], float(sdy / count), float(sdy_xhat / count), 0.f);
  }
};

// V channels per access (channels.cuh's with_pack).
template <int V>
__global__ void normalise(size_t packs, int c, const bf16* __restrict__ x, const float2* __restrict__ scale_shift,
                          bf16* __restrict__ y) {
  using P = Pack<bf16, V>;
  channels::for_each_element(packs, c / V, [&](size_t k, int cp) {
    const P in = reinterpret_cast<const P*>(x)[k];
    P out;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float2 ab = scale_shift[cp * V + j];
      out.v[j] = store<bf16>(load(in.v[j]) * ab.x + ab.y);
    }
    reinterpret_cast<P*>(y)[k] = out;
  });
}

__global__ void eval_scale_shift(int c, float eps, const float* __restrict__ gamma, const float* __restrict__ beta,
                                 const float* __restrict__ running_mean, const float* __restrict__ running_var,
                                 float2* __restrict__ scale_shift) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  const float a = gamma[ch] / sqrtf(running_var[ch] + eps);
  scale_shift[ch] = make_float2(a, beta[ch] - running_mean[ch] * a);
}

template <int V>
__global__ void input_grad(size_t packs, int c, const bf16* __restrict__ x, const bf16* __restrict__ dy,
                           const float* __restrict__ mean, const float* __restrict__ invstd,
                           const float4* __restrict__ factors, bf16* __restrict__ dx) {
  using P = Pack<bf16, V>;
  channels::for_each_element(packs, c / V, [&](size_t k, int cp) {
    const P px = reinterpret_cast<const P*>(x)[k], pg = reinterpret_cast<const P*>(dy)[k];
    P out;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int ch = cp * V + j;
      const float4 f = factors[ch];
      out.v[j] = store<bf16>(f.x * (load(pg.v[j]) - f.y - (load(px.v[j]) - mean[ch]) * invstd[ch] * f.z));
    }
    reinterpret_cast<P*>(dx)[k] = out;
  });
}

void normalise_all(Context& ctx, size_t total, int c, const bf16* x, const float2* scale_shift, bf16* y) {
  channels::with_pack<bf16>(c, [&](auto v) {
    constexpr int V = decltype(v)::value;
    normalise<V><<<grid_for(total / V), 256, 0, ctx.stream()>>>(total / V, c, x, scale_shift, y);
  }, x, y);
  CONVOY_CUDA_CHECK_LAUNCH();
}

}  // namespace

void bn_forward_train(Context& ctx, const BnShape& s, const bf16* x, const float* gamma, const float* beta, bf16* y,
                      float* save_mean, float* save_invstd, float* running_mean, float* running_var) {
  const long long rows = (long long)s.n * s.hw;
  channels::Workspace ws(ctx);
  float2* part = ws.take<float2>(size_t(channels::parts(rows)) * s.c, "batch norm");
  float2* scale_shift = ws.take<float2>(s.c, "batch norm");
  channels::sums(ctx, rows, s.c, MomentTerms{x, s.c},
                 FinishMoments{rows, s.eps, s.momentum, gamma, beta, save_mean, save_invstd, running_mean, running_var,
                               scale_shift},
                 part);
  normalise_all(ctx, size_t(rows) * s.c, s.c, x, scale_shift, y);
}

void bn_forward_eval(Context& ctx, const BnShape& s, const bf16* x, const float* gamma, const float* beta,
                     const float* running_mean, const float* running_var, bf16* y) {
  channels::Workspace ws(ctx);
  float2* scale_shift = ws.take<float2>(s.c, "batch norm");
  eval_scale_shift<<<(s.c + 255) / 256, 256, 0, ctx.stream()>>>(s.c, s.eps, gamma, beta, running_mean, running_var,
                                                                 scale_shift);
  CONVOY_CUDA_CHECK_LAUNCH();
  normalise_all(ctx, size_t(s.n) * s.hw * s.c, s.c, x, scale_shift, y);
}

void bn_backward(Context& ctx, const BnShape& s, const bf16* x, const bf16* dy, const float* gamma,
                 const float* save_mean, const float* save_invstd, bf16* dx, float* dgamma, float* dbeta) {
  const long long rows = (long long)s.n * s.hw;
  channels::Workspace ws(ctx);
  float2* part = ws.take<float2>(size_t(channels::parts(rows)) * s.c, "batch norm backward");
  float4* factors = ws.take<float4>(s.c, "batch norm backward");
  channels::sums(ctx, rows, s.c, GradTerms{x, dy, save_mean, save_invstd, s.c},
                 FinishGrad{rows, gamma, save_invstd, dgamma, dbeta, factors}, part);
  if (!dx) return;  // the first layer: only the parameter gradients
  const size_t total = size_t(rows) * s.c;
  channels::with_pack<bf16>(s.c, [&](auto v) {
    constexpr int V = decltype(v)::value;
    input_grad<V><<<grid_for(total / V), 256, 0, ctx.stream()>>>(total / V, s.c, x, dy, save_mean, save_invstd,
                                                                  factors, dx);
  }, x, dy, dx);
  CONVOY_CUDA_CHECK_LAUNCH();
}

}  // namespace convoy::gpu
