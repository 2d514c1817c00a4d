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

// y = x * a + b per channel, from the saved statistics; each step rounded explicitly (no
// contraction left to the compiler), so that the backward pass of a fused ReLU recomputes every
// forward value, and so its mask, bit for bit.
__device__ __forceinline__ float2 scale_and_shift(float gamma, float beta, float mean, float invstd) {
  const float a = __fmul_rn(gamma, invstd);
  return make_float2(a, __fsub_rn(beta, __fmul_rn(mean, a)));
}
__device__ __forceinline__ float normalised(float x, float2 ab) { return __fadd_rn(__fmul_rn(x, ab.x), ab.y); }

// Whether the fused ReLU let x's gradient through: its stored output, max(0, y) rounded, is > 0.
__device__ __forceinline__ bool relu_open(float x, float2 ab) { return load(store<bf16>(normalised(x, ab))) > 0.f; }

struct MomentTerms {
  const bf16* x;
  int c;
  __device__ void begin(int) {}
  __device__ float2 operator()(long long r, int ch) const {
    const float v = load(x[size_t(r) * c + ch]);
    return make_float2(v, v * v);
  }
  template <int V>
  __device__ void begin_pack(int) {}
  template <int V>
  __device__ void pack(long long r, int p, float2 (&out)[V]) const {
    const Pack<bf16, V> q = reinterpret_cast<const Pack<bf16, V>*>(x + size_t(r) * c)[p];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float v = load(q.v[j]);
      out[j] = make_float2(v, v * v);
    }
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
    scale_shift[ch] = scale_and_shift(gamma[ch], beta[ch], float(mean), invstd);
  }
};

// The gradient reaching batch norm: dy, or with a fused ReLU dy where that ReLU was open. With
// relu set, gamma and beta give the forward pass's scale and shift.
struct GradTerms {
  const bf16 *x, *dy;
  const float *mean, *invstd, *gamma, *beta;
  bool relu;
  int c;
  float m = 0, k = 0;
  float2 ab{};
  float mp[kPack<bf16>] = {}, kp[kPack<bf16>] = {};
  float2 abp[kPack<bf16>] = {};
  __device__ void begin(int ch) {
    m = mean[ch];
    k = invstd[ch];
    if (relu) ab = scale_and_shift(gamma[ch], beta[ch], m, k);
  }
  __device__ float2 operator()(long long r, int ch) const {
    const size_t i = size_t(r) * c + ch;
    const float xv = load(x[i]);
    const float g = !relu || relu_open(xv, ab) ? load(dy[i]) : 0.f;
    return make_float2(g, g * (xv - m) * k);
  }
  template <int V>
  __device__ void begin_pack(int p) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      mp[j] = mean[p * V + j], kp[j] = invstd[p * V + j];
      if (relu) abp[j] = scale_and_shift(gamma[p * V + j], beta[p * V + j], mp[j], kp[j]);
    }
  }
  template <int V>
  __device__ void pack(long long r, int p, float2 (&out)[V]) const {
    using P = Pack<bf16, V>;
    const size_t k = size_t(r) * (c / V) + p;
    const P px = reinterpret_cast<const P*>(x)[k], pg = reinterpret_cast<const P*>(dy)[k];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float xv = load(px.v[j]);
      const float g = !relu || relu_open(xv, abp[j]) ? load(pg.v[j]) : 0.f;
      out[j] = make_float2(g, g * (xv - mp[j]) * kp[j]);
    }
  }
};

// dgamma, dbeta, and dx = k * (dy - mean(dy) - xhat * mean(dy * xhat)) as dx = a * dy + b * x + d
// per channel (xhat = (x - mean) * invstd, k = gamma * invstd).
struct FinishGrad {
  long long count;
  const float *gamma, *mean, *invstd;
  float *dgamma, *dbeta;
  float4* factors;  // a, b, d
  __device__ void operator()(int ch, double sdy, double sdy_xhat) const {
    dgamma[ch] = float(sdy_xhat);
    dbeta[ch] = float(sdy);
    const double k = double(gamma[ch]) * invstd[ch], t = double(invstd[ch]) * (sdy_xhat / count);
    factors[ch] = make_float4(float(k), float(-k * t), float(k * (t * mean[ch] - sdy / count)), 0.f);
  }
};

// V channels per access (channels.cuh's with_pack); with `relu`, max(0, y).
template <int V, bool Relu>
__global__ void normalise(size_t packs, int c, const bf16* __restrict__ x, const float2* __restrict__ scale_shift,
                          bf16* __restrict__ y) {
  using P = Pack<bf16, V>;
  channels::for_each_element(packs, c / V, [&](size_t k, int cp) {
    const P in = reinterpret_cast<const P*>(x)[k];
    P out;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float v = normalised(load(in.v[j]), scale_shift[cp * V + j]);
      out.v[j] = store<bf16>(Relu ? fmaxf(v, 0.f) : v);
    }
    reinterpret_cast<P*>(y)[k] = out;
  });
}

__global__ void eval_scale_shift(int c, float eps, const float* __restrict__ gamma, const float* __restrict__ beta,
                                 const float* __restrict__ running_mean, const float* __restrict__ running_var,
                                 float2* __restrict__ scale_shift) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  scale_shift[ch] = scale_and_shift(gamma[ch], beta[ch], running_mean[ch], 1.f / sqrtf(running_var[ch] + eps));
}

// factors[ch] = (a, b, d) of dx = a * dy + b * x + d; with Relu, ab[ch] the forward scale and shift.
template <int V, bool Relu>
__global__ void input_grad(size_t packs, int c, const bf16* __restrict__ x, const bf16* __restrict__ dy,
                           const float4* __restrict__ factors, const float2* __restrict__ ab,
                           bf16* __restrict__ dx) {
  using P = Pack<bf16, V>;
  channels::for_each_element(packs, c / V, [&](size_t k, int cp) {
    const P px = reinterpret_cast<const P*>(x)[k], pg = reinterpret_cast<const P*>(dy)[k];
    P out;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float4 f = factors[cp * V + j];
      const float xv = load(px.v[j]);
      const float g = !Relu || relu_open(xv, ab[cp * V + j]) ? load(pg.v[j]) : 0.f;
      out.v[j] = store<bf16>(f.x * g + f.y * xv + f.z);
    }
    reinterpret_cast<P*>(dx)[k] = out;
  });
}

__global__ void saved_scale_shift(int c, const float* __restrict__ gamma, const float* __restrict__ beta,
                                  const float* __restrict__ mean, const float* __restrict__ invstd,
                                  float2* __restrict__ ab) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch < c) ab[ch] = scale_and_shift(gamma[ch], beta[ch], mean[ch], invstd[ch]);
}

void normalise_all(Context& ctx, size_t total, int c, const bf16* x, const float2* scale_shift, bf16* y, bool relu) {
  channels::with_pack<bf16>(c, [&](auto v) {
    constexpr int V = decltype(v)::value;
    if (relu)
      normalise<V, true><<<grid_for(total / V), 256, 0, ctx.stream()>>>(total / V, c, x, scale_shift, y);
    else
      normalise<V, false><<<grid_for(total / V), 256, 0, ctx.stream()>>>(total / V, c, x, scale_shift, y);
  }, x, y);
  CONVOY_CUDA_CHECK_LAUNCH();
}

}  // namespace

void bn_forward_train(Context& ctx, const BnShape& s, const bf16* x, const float* gamma, const float* beta, bf16* y,
                      float* save_mean, float* save_invstd, float* running_mean, float* running_var, bool relu) {
  const long long rows = (long long)s.n * s.hw;
  channels::Workspace ws(ctx);
  float2* part = ws.take<float2>(size_t(channels::parts(rows)) * s.c, "batch norm");
  float2* scale_shift = ws.take<float2>(s.c, "batch norm");
  channels::with_pack<bf16>(s.c, [&](auto v) {
    channels::sums<decltype(v)::value>(
        ctx, rows, s.c, MomentTerms{x, s.c},
        FinishMoments{rows, s.eps, s.momentum, gamma, beta, save_mean, save_invstd, running_mean, running_var,
                      scale_shift},
        part);
  }, x);
  normalise_all(ctx, size_t(rows) * s.c, s.c, x, scale_shift, y, relu);
}

void bn_forward_eval(Context& ctx, const BnShape& s, const bf16* x, const float* gamma, const float* beta,
                     const float* running_mean, const float* running_var, bf16* y, bool relu) {
  channels::Workspace ws(ctx);
  float2* scale_shift = ws.take<float2>(s.c, "batch norm");
  eval_scale_shift<<<(s.c + 255) / 256, 256, 0, ctx.stream()>>>(s.c, s.eps, gamma, beta, running_mean, running_var,
                                                                 scale_shift);
  CONVOY_CUDA_CHECK_LAUNCH();
  normalise_all(ctx, size_t(s.n) * s.hw * s.c, s.c, x, scale_shift, y, relu);
}

void bn_backward(Context& ctx, const BnShape& s, const bf16* x, const bf16* dy, const float* gamma,
                 const float* save_mean, const float* save_invstd, bf16* dx, float* dgamma, float* dbeta,
                 const float* relu_beta) {
  const long long rows = (long long)s.n * s.hw;
  const bool relu = relu_beta != nullptr;
  channels::Workspace ws(ctx);
  float2* part = ws.take<float2>(size_t(channels::parts(rows)) * s.c, "batch norm backward");
  float4* factors = ws.take<float4>(s.c, "batch norm backward");
  float2* ab = ws.take<float2>(s.c, "batch norm backward");
  channels::with_pack<bf16>(s.c, [&](auto v) {
    channels::sums<decltype(v)::value>(
        ctx, rows, s.c, GradTerms{x, dy, save_mean, save_invstd, gamma, relu_beta, relu, s.c},
        FinishGrad{rows, gamma, save_mean, save_invstd, dgamma, dbeta, factors}, part);
  }, x, dy);
  if (!dx) return;  // the first layer: only the parameter gradients
  if (relu) {
    saved_scale_shift<<<(s.c + 255) / 256, 256, 0, ctx.stream()>>>(s.c, gamma, relu_beta, save_mean, save_invstd, ab);
    CONVOY_CUDA_CHECK_LAUNCH();
  }
  const size_t total = size_t(rows) * s.c;
  channels::with_pack<bf16>(s.c, [&](auto v) {
    constexpr int V = decltype(v)::value;
    if (relu)
      input_grad<V, true><<<grid_for(total / V), 256, 0, ctx.stream()>>>(total / V, s.c, x, dy, factors, ab, dx);
    else
      input_grad<V, false><<<grid_for(total / V), 256, 0, ctx.stream()>>>(total / V, s.c, x, dy, factors, ab, dx);
  }, x, dy, dx);
  CONVOY_CUDA_CHECK_LAUNCH();
}

}  // namespace convoy::gpu
