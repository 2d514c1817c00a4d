// CPU reference convolution: im2col and sgemm. Images go to OpenMP threads in small groups whose
// columns sit side by side in one matrix, so each sgemm is wide enough to run near the BLAS peak
// even on 14x14 maps; each BLAS call runs single-threaded on its caller's thread (SerialBlas).
#include "train/layers/conv.h"

#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "train/layers/elementwise.h"
#include "train/layers/layer_keys.h"
#include "train/layers/serial_blas.h"

namespace convoy {
namespace {

// Enough images per group for about this many sgemm columns.
constexpr int kGroupColumns = 1024;

int images_per_group(const ConvShape& s) {
  const int P = s.h_out() * s.w_out();
  return std::max(1, std::min(std::min(s.n, 16), (kGroupColumns + P - 1) / P));
}

// The output columns [lo, hi) of kernel column j whose input column lies inside the image.
void valid_columns(const ConvShape& s, int j, int wo, int& lo, int& hi) {
  lo = std::min(wo, std::max(0, (s.pad - j + s.stride - 1) / s.stride));
  hi = std::max(lo, std::min(wo, (s.w_in + s.pad - j + s.stride - 1) / s.stride));
}

// col[(c * kh + i) * kw + j][oy * wo + ox] = x[c][oy * stride - pad + i][ox * stride - pad + j],
// with rows `ld` floats apart (several images share the matrix side by side).
void im2col(const ConvShape& s, int channels, const float* x, float* col, size_t ld) {
  const int ho = s.h_out(), wo = s.w_out();
  for (int c = 0; c < channels; ++c)
    for (int i = 0; i < s.kh; ++i)
      for (int j = 0; j < s.kw; ++j) {
        float* out = col + ((size_t(c) * s.kh + i) * s.kw + j) * ld;
        const float* plane = x + size_t(c) * s.h_in * s.w_in;
        int lo, hi;
        valid_columns(s, j, wo, lo, hi);
        for (int oy = 0; oy < ho; ++oy) {
          const int iy = oy * s.stride - s.pad + i;
          float* row = out + size_t(oy) * wo;
          if (iy < 0 || iy >= s.h_in) {
            std::fill(row, row + wo, 0.f);
            continue;
          }
          std::fill(row, row + lo, 0.f);
          std::fill(row + hi, row + wo, 0.f);
          const float* src = plane + size_t(iy) * s.w_in + lo * s.stride - s.pad + j;
          if (s.stride == 1)
            std::memcpy(row + lo, src, sizeof(float) * (hi - lo));
          else
            for (int ox = lo; ox < hi; ++ox) row[ox] = src[(ox - lo) * s.stride];
        }
      }
}

// The adjoint of im2col: adds every column entry back onto the input pixel it came from.
void col2im(const ConvShape& s, int channels, const float* col, size_t ld, float* x) {
  const int ho = s.h_out(), wo = s.w_out();
  std::memset(x, 0, sizeof(float) * channels * s.h_in * s.w_in);
  for (int c = 0; c < channels; ++c)
    for (int i = 0; i < s.kh; ++i)
      for (int j = 0; j < s.kw; ++j) {
        const float* in = col + ((size_t(c) * s.kh + i) * s.kw + j) * ld;
        float* plane = x + size_t(c) * s.h_in * s.w_in;
        int lo, hi;
        valid_columns(s, j, wo, lo, hi);
        for (int oy = 0; oy < ho; ++oy) {
          const int iy = oy * s.stride - s.pad + i;
          if (iy < 0 || iy >= s.h_in) continue;
          float* dst = plane + size_t(iy) * s.w_in + lo * s.stride - s.pad + j;
          const float* row = in + size_t(oy) * wo;
          if (s.stride == 1) {
#pragma omp simd
            for (int ox = lo; ox < hi; ++ox) dst[ox - lo] += row[ox];
          } else {
            for (int ox = lo; ox < hi; ++ox) dst[(ox - lo) * s.stride] += row[ox];
          }
        }
      }
}

// out = parts[0] + parts[1] + ... + parts[count - 1], each element summed in that order however the
// elements are split over threads; blocks of elements keep the reads sequential.
void sum_parts(const float* parts, int count, size_t n, float* out) {
  constexpr size_t kBlock = 4096;
  const long long blocks = (long long)((n + kBlock - 1) / kBlock);
#pragma omp parallel for schedule(static) if (n * size_t(count) > kParallelMin)
  for (long long b = 0; b < blocks; ++b) {
    const size_t lo = size_t(b) * kBlock, len = std::min(kBlock, n - lo);
    float* o = out + lo;
    std::copy(parts + lo, parts + lo + len, o);
    for (int p = 1; p < count; ++p) {
      const float* in = parts + size_t(p) * n + lo;
#pragma omp simd
      for (size_t i = 0; i < len; ++i) o[i] += in[i];
    }
  }
}

}  // namespace

void conv_forward(const ConvShape& s, const float* x, const float* w, const float* b, float* y) {
  const int cg_in = s.c_in / s.groups, cg_out = s.c_out / s.groups;
  const int K = cg_in * s.kh * s.kw, P = s.h_out() * s.w_out();
  const size_t in_img = size_t(s.c_in) * s.h_in * s.w_in, out_img = size_t(s.c_out) * P;
  const int per = images_per_group(s), chunks = (s.n + per - 1) / per;
  const size_t ld = size_t(per) * P;
  const SerialBlas serial;
#pragma omp parallel
  {
    std::vector<float> col(size_t(K) * ld), out(size_t(cg_out) * ld);
#pragma omp for schedule(static)
    for (int chunk = 0; chunk < chunks; ++chunk) {
      const int n0 = chunk * per, nb = std::min(per, s.n - n0);
      for (int g = 0; g < s.groups; ++g) {
        for (int j = 0; j < nb; ++j)
          im2col(s, cg_in, x + (n0 + j) * in_img + size_t(g) * cg_in * s.h_in * s.w_in, col.data() + size_t(j) * P, ld);
        // out [cg_out, nb * P] = w_g [cg_out, K] * col [K, nb * P]
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, cg_out, nb * P, K, 1.f, w + size_t(g) * cg_out * K, K,
                    col.data(), int(ld), 0.f, out.data(), int(ld));
        for (int j = 0; j < nb; ++j)
          for (int c = 0; c < cg_out; ++c) {
            const float* src = out.data() + size_t(c) * ld + size_t(j) * P;
            float* dst = y + (n0 + j) * out_img + size_t(g * cg_out + c) * P;
            const float bias = b ? b[g * cg_out + c] : 0.f;
            if (s.relu) {
              for (int p = 0; p < P; ++p) {
                const float v = src[p] + bias;
                dst[p] = v > 0.f ? v : 0.f;
              }
            } else {
              for (int p = 0; p < P; ++p) dst[p] = src[p] + bias;
            }
          }
      }
    }
  }
}

void conv_backward(const ConvShape& s, const float* x, const float* w, const float* y, const float* dy, float* dx,
                   float* dw, float* db) {
  const int cg_in = s.c_in / s.groups, cg_out = s.c_out / s.groups;
  const int K = cg_in * s.kh * s.kw, P = s.h_out() * s.w_out();
  const size_t in_img = size_t(s.c_in) * s.h_in * s.w_in, out_img = size_t(s.c_out) * P;
  const int per = images_per_group(s), chunks = (s.n + per - 1) / per;
  const size_t ld = size_t(per) * P;
  const size_t wn = s.weight_count();
  // One partial sum per image group, added in group order: the same bits whichever threads ran the
  // groups and however many there were (a sum per thread would follow the thread count).
  std::unique_ptr<float[]> dw_part(new float[size_t(chunks) * wn]);
  std::vector<float> db_part(size_t(chunks) * s.c_out, 0.f);
  const SerialBlas serial;
#pragma omp parallel
  {
    std::vector<float> col(size_t(K) * ld), dcol(dx ? size_t(K) * ld : 0), gout(size_t(cg_out) * ld);
#pragma omp for schedule(static)
    for (int chunk = 0; chunk < chunks; ++chunk) {
      const int n0 = chunk * per, nb = std::min(per, s.n - n0);
      float* my_dw = dw_part.get() + size_t(chunk) * wn;
      float* my_db = db_part.data() + size_t(chunk) * s.c_out;
      for (int g = 0; g < s.groups; ++g) {
        // The group's output gradient side by side; with the fused ReLU, zero where the output
        // was not positive (both loads unconditional: a blend, not an unpredictable branch).
        for (int j = 0; j < nb; ++j)
          for (int c = 0; c < cg_out; ++c) {
            const size_t at = (n0 + j) * out_img + size_t(g * cg_out + c) * P;
            float* dst = gout.data() + size_t(c) * ld + size_t(j) * P;
            float sum = 0.f;
            for (int p = 0; p < P; ++p) {
              const float v = dy[at + p];
              dst[p] = s.relu ? (y[at + p] > 0.f ? v : 0.f) : v;
              sum += dst[p];
            }
            my_db[g * cg_out + c] += sum;
          }
        for (int j = 0; j < nb; ++j)
          im2col(s, cg_in, x + (n0 + j) * in_img + size_t(g) * cg_in * s.h_in * s.w_in, col.data() + size_t(j) * P, ld);
        // the group's dw_g = gout [cg_out, nb * P] * col^T [nb * P, K]
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, cg_out, K, nb * P, 1.f, gout.data(), int(ld), col.data(),
                    int(ld), 0.f, my_dw + size_t(g) * cg_out * K, K);
        if (!dx) continue;
        // dcol [K, nb * P] = w_g^T [K, cg_out] * gout [cg_out, nb * P]
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, nb * P, cg_out, 1.f, w + size_t(g) * cg_out * K, K,
                    gout.data(), int(ld), 0.f, dcol.data(), int(ld));
        for (int j = 0; j < nb; ++j)
          col2im(s, cg_in, dcol.data() + size_t(j) * P, ld,
                 dx + (n0 + j) * in_img + size_t(g) * cg_in * s.h_in * s.w_in);
      }
    }
  }
  sum_parts(dw_part.get(), chunks, wn, dw);
  if (db) sum_parts(db_part.data(), chunks, size_t(s.c_out), db);
}

namespace {

ConvShape shape_of(const ConvParams& p, Dims in, int n) {
  ConvShape s;
  s.n = n;
  s.c_in = in.c, s.h_in = in.h, s.w_in = in.w;
  s.c_out = p.filters;
  s.kh = s.kw = p.kernel;
  s.stride = p.stride, s.pad = p.pad, s.groups = p.groups;
  return s;
}

}  // namespace

ConvShape conv_shape(const Node& nd, int n) { return shape_of(params_of<ConvParams>(nd.spec), nd.in_dims[0], n); }

std::vector<std::string> ConvOp::keys() const { return {"filters", "kernel", "stride", "pad", "groups", "bias"}; }

std::shared_ptr<const OpParams> ConvOp::parse(const LayerKeys& k) const {
  auto p = std::make_shared<ConvParams>();
  p->filters = k.get_int("filters", 0, 1, 1 << 16);
  if (p->filters == 0) k.fail("conv layer '" + k.name() + "' needs filters");
  p->kernel = k.get_int("kernel", 3, 1, 64);
  p->stride = k.get_int("stride", 1, 1, 64);
  p->pad = k.get_int("pad", 0, 0, 64);
  p->groups = k.get_int("groups", 1, 1, 1 << 16);
  p->bias = k.get_bool("bias", true);
  return p;
}

std::string ConvOp::example() const { return "filters = 6\nkernel = 3\npad = 1\ngroups = 2\n"; }

// It runs an only consumer's ReLU itself on the CPU; on the GPU its backward pass adds an input's
// gradient to what the buffer holds in cuDNN's own pass (beta = 1).
OpFusion ConvOp::fusion(const Node&) const {
  OpFusion f;
  f.relu = true;
  f.adds_to_dx = true;
  return f;
}

OpShape ConvOp::shape(const ShapeIn& s) const {
  const ConvParams& p = params_of<ConvParams>(s.spec);
  const Dims in = s.in[0];
  if (in.c % p.groups || p.filters % p.groups)
    s.fail("groups = " + std::to_string(p.groups) + " must divide input channels (" + std::to_string(in.c) +
           ") and filters (" + std::to_string(p.filters) + ")");
  if (in.h + 2 * p.pad < p.kernel || in.w + 2 * p.pad < p.kernel)
    s.fail("kernel " + std::to_string(p.kernel) + " is larger than the padded input " + dims_text(in));
  const ConvShape c = shape_of(p, in, 1);
  OpShape o;
  o.out = {p.filters, c.h_out(), c.w_out()};
  o.weights = c.weight_count();
  o.biases = p.bias ? size_t(p.filters) : 0;
  o.flops = 2.0 * double(o.weights) * c.h_out() * c.w_out();
  return o;
}

double ConvOp::forward(const CpuLayer& l) const {
  ConvShape s = conv_shape(l.node, l.n);
  s.relu = l.node.fused_relu;
  conv_forward(s, l.x[0], l.w, l.b, l.y);
  return 0;
}

void ConvOp::backward(const CpuLayer& l, int) const {
  ConvShape s = conv_shape(l.node, l.n);
  s.relu = l.node.fused_relu;
  conv_backward(s, l.x[0], l.w, l.node.y.data(), l.dy, l.dx, l.dw, l.db);
}

const Op& conv_op() {
  static const ConvOp op;
  return op;
}

}  // namespace convoy
