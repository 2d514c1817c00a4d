// bf16 NHWC batch normalisation with own kernels: per-channel statistics summed in fp32 and
// finished in double (channels.cuh, a fixed order), normalisation in fp32, one rounding per
// stored value. The saved statistics (mean, 1/sqrt(var + eps)) and the unbiased running-variance
// update are batchnorm.cpp's. Own kernels rather than cuDNN's batch-norm calls (deprecated in cuDNN
// 9; PyTorch keeps bf16 batch norm off them too): every sum has a fixed order, so the step's graph
// replays bit for bit, and the passes move 16-byte packs of channels.
#include <cmath>

#include "train/cuda/channel_affine.h"
#include "train/cuda/channels.cuh"
#include "train/cuda/gpu_context.h"
#include "train/cuda/storage.cuh"
#include "train/layers/batchnorm.h"

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
  template <int V>
  __device__ void stage_pack(float2 (&)[channels::kTilePacks][V + 1], int) {}
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
    const float a = gamma[ch] * invstd;
    scale_shift[ch] = make_float2(a, beta[ch] - float(mean) * a);
  }
};

// The gradient reaching batch norm: dy, or with a fused ReLU (ry its output) dy where ry > 0.
__device__ __forceinline__ float grad_in(const bf16* ry, size_t i, float dy) {
  return !ry || load(ry[i]) > 0.f ? dy : 0.f;
}

struct GradTerms {
  const bf16 *x, *dy, *ry;
  const float *mean, *invstd;
  int c;
  const uint8_t* bits;  // with ry: the ReLU's output signs, read instead of ry (packs only)
  float m = 0, k = 0;
  const volatile float2* stats = nullptr;  // packs: this thread's channels' (mean, invstd), in shared memory
  __device__ void begin(int ch) {
    m = mean[ch];
    k = invstd[ch];
  }
  __device__ float2 operator()(long long r, int ch) const {
    const size_t i = size_t(r) * c + ch;
    const float g = grad_in(ry, i, load(dy[i]));
    return make_float2(g, bn_grad_term(g, load(x[i]), m, k));
  }
  template <int V>
  __device__ void stage_pack(float2 (&consts)[channels::kTilePacks][V + 1], int cp) {
    channels::stage_channel_pairs<V>(consts, cp, mean, invstd);
    stats = consts[threadIdx.x];
  }
  template <int V>
  __device__ void pack(long long r, int p, float2 (&out)[V]) const {
    using P = Pack<bf16, V>;
    const size_t k = size_t(r) * (c / V) + p;
    const P px = reinterpret_cast<const P*>(x)[k];
    P pg = reinterpret_cast<const P*>(dy)[k];
    if (ry) {
      const unsigned keep = relu_signs<bf16, V>(bits, ry, k);
#pragma unroll
      for (int j = 0; j < V; ++j)
        if (!(keep >> j & 1u)) pg.v[j] = store<bf16>(0.f);
    }
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float g = load(pg.v[j]);
      out[j] = make_float2(g, bn_grad_term(g, load(px.v[j]), stats[j].x, stats[j].y));
    }
  }
};

// dgamma, dbeta, and the per-channel factors of dx = k * (dy - mean(dy) - (x - mean) * u), with
// k = gamma * invstd and u = invstd * mean(dy * xhat): one float4 per channel. x - mean is taken
// first, so a large mean does not cancel away the digits that matter.
struct FinishGrad {
  long long count;
  const float *gamma, *mean, *invstd;
  float *dgamma, *dbeta;
  float4* factors;  // k, mean(dy), mean, u
  __device__ void operator()(int ch, double sdy, double sdy_xhat) const {
    dgamma[ch] = float(sdy_xhat);
    dbeta[ch] = float(sdy);
    factors[ch] = make_float4(gamma[ch] * invstd[ch], float(sdy / count), mean[ch],
                              float(double(invstd[ch]) * (sdy_xhat / count)));
  }
};

// V channels per access (channels.cuh's with_pack); with `relu`, min(max(0, y), relu_max), and in
// bits where given which outputs lie strictly between (where the gradient passes).
template <int V, bool Relu>
__global__ void normalise(size_t packs, int c, const bf16* __restrict__ x, const float2* __restrict__ scale_shift,
                          bf16* __restrict__ y, uint8_t* __restrict__ bits, float relu_max) {
  using P = Pack<bf16, V>;
  float2 ab[V];
  channels::for_each_in_channel_pack(
      packs, c / V,
      [&](int cp) {
#pragma unroll
        for (int j = 0; j < V; ++j) ab[j] = scale_shift[cp * V + j];
      },
      [&](size_t k) {
        const P in = reinterpret_cast<const P*>(x)[k];
        P out;
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float v = apply_affine(load(in.v[j]), ab[j]);
          out.v[j] = store<bf16>(Relu ? fminf(fmaxf(v, 0.f), relu_max) : v);
        }
        reinterpret_cast<P*>(y)[k] = out;
        if (Relu && bits) {
          unsigned b = 0;
#pragma unroll
          for (int j = 0; j < V; ++j) {
            const float o = load(out.v[j]);
            b |= (o > 0.f && o < relu_max ? 1u : 0u) << j;
          }
          bits[k] = uint8_t(b);
        }
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
                           const bf16* __restrict__ ry, const uint8_t* __restrict__ bits,
                           const float4* __restrict__ factors, bf16* __restrict__ dx) {
  using P = Pack<bf16, V>;
  float4 f[V];
  channels::for_each_in_channel_pack(
      packs, c / V,
      [&](int cp) {
#pragma unroll
        for (int j = 0; j < V; ++j) f[j] = factors[cp * V + j];
      },
      [&](size_t k) {
        const P px = reinterpret_cast<const P*>(x)[k], pg = reinterpret_cast<const P*>(dy)[k];
        unsigned keep = ~0u;
        if (ry) keep = relu_signs<bf16, V>(bits, ry, k);
        P out;
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float g = keep >> j & 1u ? load(pg.v[j]) : 0.f;
          out.v[j] = store<bf16>(f[j].x * (g - f[j].y - (load(px.v[j]) - f[j].z) * f[j].w));
        }
        reinterpret_cast<P*>(dx)[k] = out;
      });
}

void normalise_all(Context& ctx, size_t total, int c, const bf16* x, const float2* scale_shift, bf16* y, bool relu,
                   uint8_t* bits, float relu_max) {
  channels::with_pack<bf16>(
      c,
      [&](auto v) {
        constexpr int V = decltype(v)::value;
        if (bits && V == 1) fail("batch norm: a ReLU's signs as bits need whole 16-byte packs of channels");
        if (relu)
          normalise<V, true><<<channels::grid_for_rows<normalise<V, true>>(total / V, c / V), 256, 0, ctx.stream()>>>(
              total / V, c, x, scale_shift, y, bits, relu_max);
        else
          normalise<V, false><<<channels::grid_for_rows<normalise<V, false>>(total / V, c / V), 256, 0, ctx.stream()>>>(
              total / V, c, x, scale_shift, y, nullptr, relu_max);
      },
      x, y);
  CONVOY_CUDA_CHECK_LAUNCH();
}

// The batch's statistics and scale_shift, the partial sums in ws.
void batch_scale_shift(Context& ctx, channels::Workspace& ws, const BnShape& s, const bf16* x, const float* gamma,
                       const float* beta, float* save_mean, float* save_invstd, float* running_mean, float* running_var,
                       float2* scale_shift) {
  const long long rows = (long long)s.n * s.hw;
  float2* part = ws.take<float2>(size_t(channels::parts(rows)) * s.c, "batch norm");
  channels::with_pack<bf16>(
      s.c,
      [&](auto v) {
        channels::sums<decltype(v)::value>(ctx, rows, s.c, MomentTerms{x, s.c},
                                           FinishMoments{rows, s.eps, s.momentum, gamma, beta, save_mean, save_invstd,
                                                         running_mean, running_var, scale_shift},
                                           part);
      },
      x);
}

}  // namespace

void bn_scale_shift_train(Context& ctx, const BnShape& s, const bf16* x, const float* gamma, const float* beta,
                          float* save_mean, float* save_invstd, float* running_mean, float* running_var,
                          float2* scale_shift) {
  channels::Workspace ws(ctx);
  batch_scale_shift(ctx, ws, s, x, gamma, beta, save_mean, save_invstd, running_mean, running_var, scale_shift);
}

void bn_scale_shift_eval(Context& ctx, const BnShape& s, const float* gamma, const float* beta,
                         const float* running_mean, const float* running_var, float2* scale_shift) {
  eval_scale_shift<<<(s.c + 255) / 256, 256, 0, ctx.stream()>>>(s.c, s.eps, gamma, beta, running_mean, running_var,
                                                                scale_shift);
  CONVOY_CUDA_CHECK_LAUNCH();
}

void bn_apply(Context& ctx, const BnShape& s, const bf16* x, const float2* scale_shift, bf16* y, bool relu,
              uint8_t* relu_bits, float relu_max) {
  normalise_all(ctx, size_t(s.n) * s.hw * s.c, s.c, x, scale_shift, y, relu, relu_bits, relu_max);
}

void bn_forward_train(Context& ctx, const BnShape& s, const bf16* x, const float* gamma, const float* beta, bf16* y,
                      float* save_mean, float* save_invstd, float* running_mean, float* running_var, bool relu) {
  channels::Workspace ws(ctx);
  float2* scale_shift = ws.take<float2>(s.c, "batch norm");
  batch_scale_shift(ctx, ws, s, x, gamma, beta, save_mean, save_invstd, running_mean, running_var, scale_shift);
  bn_apply(ctx, s, x, scale_shift, y, relu);
}

void bn_forward_eval(Context& ctx, const BnShape& s, const bf16* x, const float* gamma, const float* beta,
                     const float* running_mean, const float* running_var, bf16* y, bool relu) {
  channels::Workspace ws(ctx);
  float2* scale_shift = ws.take<float2>(s.c, "batch norm");
  bn_scale_shift_eval(ctx, s, gamma, beta, running_mean, running_var, scale_shift);
  bn_apply(ctx, s, x, scale_shift, y, relu);
}

void bn_backward(Context& ctx, const BnShape& s, const bf16* x, const bf16* dy, const float* gamma,
                 const float* save_mean, const float* save_invstd, bf16* dx, float* dgamma, float* dbeta,
                 const bf16* relu_y, const uint8_t* relu_bits, const float2* sums_taken) {
  const long long rows = (long long)s.n * s.hw;
  channels::Workspace ws(ctx);
  float4* factors = ws.take<float4>(s.c, "batch norm backward");
  const FinishGrad finish{rows, gamma, save_mean, save_invstd, dgamma, dbeta, factors};
  const bf16* ry = relu_y ? relu_y : x;  // any pack-aligned pointer for the check when there is no ReLU
  if (sums_taken) {
    if (relu_y) fail("bn_backward: gradient sums taken by the consumer of a batch norm with its own ReLU");
    channels::finish_parts(ctx, rows, s.c, finish, sums_taken);
  } else {
    float2* part = ws.take<float2>(size_t(channels::parts(rows)) * s.c, "batch norm backward");
    channels::with_pack<bf16>(
        s.c,
        [&](auto v) {
          constexpr int V = decltype(v)::value;
          if (relu_bits && V == 1) fail("batch norm: a ReLU's signs as bits need whole 16-byte packs of channels");
          channels::sums<V>(ctx, rows, s.c, GradTerms{x, dy, relu_y, save_mean, save_invstd, s.c, relu_bits}, finish,
                            part);
        },
        x, dy, ry);
  }
  if (!dx) return;  // the first layer: only the parameter gradients
  const size_t total = size_t(rows) * s.c;
  channels::with_pack<bf16>(
      s.c,
      [&](auto v) {
        constexpr int V = decltype(v)::value;
        input_grad<V><<<channels::grid_for_rows<input_grad<V>>(total / V, s.c / V), 256, 0, ctx.stream()>>>(
            total / V, s.c, x, dy, relu_y, relu_bits, factors, dx);
      },
      x, dy, ry, dx);
  CONVOY_CUDA_CHECK_LAUNCH();
}

}  // namespace convoy::gpu
