// CPU reference pooling, one OpenMP task per (image, channel) plane; max pool records where each
// maximum came from so that backward is a scatter.
#include "train/layers/pool.h"

#include <cstring>
#include <limits>

#include "train/layers/layer_keys.h"

namespace convoy {

void max_pool_forward(const PoolShape& s, const float* x, float* y, int32_t* argmax) {
  const int ho = s.h_out(), wo = s.w_out(), planes = s.n * s.c;
#pragma omp parallel for schedule(static)
  for (int p = 0; p < planes; ++p) {
    const float* in = x + size_t(p) * s.h_in * s.w_in;
    float* out = y + size_t(p) * ho * wo;
    int32_t* am = argmax + size_t(p) * ho * wo;
    for (int oy = 0; oy < ho; ++oy)
      for (int ox = 0; ox < wo; ++ox) {
        float best = -std::numeric_limits<float>::infinity();
        int32_t where = -1;
        for (int i = 0; i < s.kh; ++i) {
          const int iy = oy * s.stride - s.pad + i;
          if (iy < 0 || iy >= s.h_in) continue;
          for (int j = 0; j < s.kw; ++j) {
            const int ix = ox * s.stride - s.pad + j;
            if (ix < 0 || ix >= s.w_in) continue;
            // Selects instead of a branch: which element wins is data-dependent and unpredictable.
            const float v = in[iy * s.w_in + ix];
            const bool take = where < 0 || v > best;
            best = take ? v : best;
            where = take ? iy * s.w_in + ix : where;
          }
        }
        out[oy * wo + ox] = best;
        am[oy * wo + ox] = where;
      }
  }
}

void max_pool_backward(const PoolShape& s, const float* dy, const int32_t* argmax, float* dx) {
  const int ho = s.h_out(), wo = s.w_out(), planes = s.n * s.c;
#pragma omp parallel for schedule(static)
  for (int p = 0; p < planes; ++p) {
    float* in = dx + size_t(p) * s.h_in * s.w_in;
    std::memset(in, 0, sizeof(float) * s.h_in * s.w_in);
    const float* out = dy + size_t(p) * ho * wo;
    const int32_t* am = argmax + size_t(p) * ho * wo;
    for (int i = 0; i < ho * wo; ++i)
      if (am[i] >= 0) in[am[i]] += out[i];
  }
}

void avg_pool_forward(const PoolShape& s, const float* x, float* y) {
  const int ho = s.h_out(), wo = s.w_out(), planes = s.n * s.c;
  const float scale = 1.f / float(s.kh * s.kw);
#pragma omp parallel for schedule(static)
  for (int p = 0; p < planes; ++p) {
    const float* in = x + size_t(p) * s.h_in * s.w_in;
    float* out = y + size_t(p) * ho * wo;
    for (int oy = 0; oy < ho; ++oy)
      for (int ox = 0; ox < wo; ++ox) {
        float sum = 0.f;
        for (int i = 0; i < s.kh; ++i) {
          const int iy = oy * s.stride - s.pad + i;
          if (iy < 0 || iy >= s.h_in) continue;
          for (int j = 0; j < s.kw; ++j) {
            const int ix = ox * s.stride - s.pad + j;
            if (ix >= 0 && ix < s.w_in) sum += in[iy * s.w_in + ix];
          }
        }
        out[oy * wo + ox] = sum * scale;
      }
  }
}

void avg_pool_backward(const PoolShape& s, const float* dy, float* dx) {
  const int ho = s.h_out(), wo = s.w_out(), planes = s.n * s.c;
  const float scale = 1.f / float(s.kh * s.kw);
#pragma omp parallel for schedule(static)
  for (int p = 0; p < planes; ++p) {
    float* in = dx + size_t(p) * s.h_in * s.w_in;
    std::memset(in, 0, sizeof(float) * s.h_in * s.w_in);
    const float* out = dy + size_t(p) * ho * wo;
    for (int oy = 0; oy < ho; ++oy)
      for (int ox = 0; ox < wo; ++ox) {
        const float g = out[oy * wo + ox] * scale;
        for (int i = 0; i < s.kh; ++i) {
          const int iy = oy * s.stride - s.pad + i;
          if (iy < 0 || iy >= s.h_in) continue;
          for (int j = 0; j < s.kw; ++j) {
            const int ix = ox * s.stride - s.pad + j;
            if (ix >= 0 && ix < s.w_in) in[iy * s.w_in + ix] += g;
          }
        }
      }
  }
}

void global_avg_pool_forward(int n, int c, int hw, const float* x, float* y) {
#pragma omp parallel for schedule(static)
  for (int p = 0; p < n * c; ++p) {
    const float* in = x + size_t(p) * hw;
    float sum = 0.f;
    for (int i = 0; i < hw; ++i) sum += in[i];
    y[p] = sum / float(hw);
  }
}

void global_avg_pool_backward(int n, int c, int hw, const float* dy, float* dx) {
#pragma omp parallel for schedule(static)
  for (int p = 0; p < n * c; ++p) {
    const float g = dy[p] / float(hw);
    float* in = dx + size_t(p) * hw;
    for (int i = 0; i < hw; ++i) in[i] = g;
  }
}

namespace {

PoolShape shape_of(const PoolParams& p, Dims in, int n) {
  PoolShape s;
  s.n = n;
  s.c = in.c, s.h_in = in.h, s.w_in = in.w;
  s.kh = s.kw = p.kernel;
  s.stride = p.stride, s.pad = p.pad, s.ceil = p.ceil_mode;
  return s;
}

}  // namespace

PoolShape pool_shape(const Node& nd, int n) { return shape_of(params_of<PoolParams>(nd.spec), nd.in_dims[0], n); }

std::shared_ptr<const OpParams> WindowPoolOp::parse(const LayerKeys& k) const { return read_window(k); }

std::shared_ptr<PoolParams> WindowPoolOp::read_window(const LayerKeys& k) {
  auto p = std::make_shared<PoolParams>();
  p->kernel = k.get_int("kernel", 2, 1, 64);
  p->stride = k.get_int("stride", p->kernel, 1, 64);
  p->pad = k.get_int("pad", 0, 0, 64);
  if (2 * p->pad > p->kernel) k.fail("pool layer '" + k.name() + "': pad must be at most half the kernel");
  return p;
}

OpShape WindowPoolOp::shape(const ShapeIn& s) const {
  const PoolParams& p = params_of<PoolParams>(s.spec);
  const Dims in = s.in[0];
  if (in.h + 2 * p.pad < p.kernel || in.w + 2 * p.pad < p.kernel)
    s.fail("kernel " + std::to_string(p.kernel) + " is larger than the padded input " + dims_text(in));
  const PoolShape ps = shape_of(p, in, 1);
  OpShape o;
  o.out = {in.c, ps.h_out(), ps.w_out()};
  o.flops = double(o.out.size()) * p.kernel * p.kernel;
  return o;
}

std::shared_ptr<const OpParams> MaxPoolOp::parse(const LayerKeys& k) const {
  auto p = read_window(k);
  p->ceil_mode = k.get_bool("ceil_mode", false);
  return p;
}

CpuBuffers MaxPoolOp::cpu_buffers(const Node& nd, int n) const { return {0, size_t(n) * nd.out.size()}; }

// bf16: it takes a deferred batch norm's output with its ReLU where its channels come in whole packs.
OpFusion MaxPoolOp::fusion(const Node& nd) const {
  OpFusion f;
  f.takes_channel_affine_relu = max_pool_takes_affine(pool_shape(nd, 1));
  return f;
}

double MaxPoolOp::forward(const CpuLayer& l) const {
  max_pool_forward(pool_shape(l.node, l.n), l.x[0], l.y, l.node.aux_i32.data());
  return 0;
}

void MaxPoolOp::backward(const CpuLayer& l, int) const {
  if (l.dx) max_pool_backward(pool_shape(l.node, l.n), l.dy, l.node.aux_i32.data(), l.dx);
}

double AvgPoolOp::forward(const CpuLayer& l) const {
  avg_pool_forward(pool_shape(l.node, l.n), l.x[0], l.y);
  return 0;
}

void AvgPoolOp::backward(const CpuLayer& l, int) const {
  if (l.dx) avg_pool_backward(pool_shape(l.node, l.n), l.dy, l.dx);
}

OpShape GlobalAvgPoolOp::shape(const ShapeIn& s) const {
  OpShape o;
  o.out = {s.in[0].c, 1, 1};
  o.flops = double(s.in[0].size());
  return o;
}

double GlobalAvgPoolOp::forward(const CpuLayer& l) const {
  global_avg_pool_forward(l.n, l.in().c, l.in().h * l.in().w, l.x[0], l.y);
  return 0;
}

void GlobalAvgPoolOp::backward(const CpuLayer& l, int) const {
  if (l.dx) global_avg_pool_backward(l.n, l.in().c, l.in().h * l.in().w, l.dy, l.dx);
}

const Op& max_pool_op() {
  static const MaxPoolOp op;
  return op;
}

const Op& avg_pool_op() {
  static const AvgPoolOp op;
  return op;
}

const Op& global_avg_pool_op() {
  static const GlobalAvgPoolOp op;
  return op;
}

}  // namespace convoy
