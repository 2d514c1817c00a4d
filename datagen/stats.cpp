// Sums and their reduction. Mean and variance come from the integer totals in one place, so that
// floating-point summation order never enters the result.
#include "datagen/stats.h"

#include <algorithm>
#include <cmath>

#include "shared/error.h"

namespace convoy::datagen {
namespace {

// Adds one sample to the 16-bit per-pixel counters acc[] and its per-channel sums of squares to
// sq[]. The squares go through 16 * C lanes, each always on the same channel, in 32-bit counters
// the compiler can vectorise; a lane is emptied into sq[] before 65536 squares of at most 255^2
// could overflow it. (The channel sums need no lanes: they are the per-pixel sums, folded.)
template <size_t C>
void add_sample_sums(const uint8_t* p, size_t bytes, uint16_t* acc, uint64_t* sq) {
  constexpr size_t kLanes = 16 * C, kChunk = kLanes * 65536;
  size_t at = 0;
  while (bytes - at >= kLanes) {
    const size_t end = at + std::min(kChunk, (bytes - at) / kLanes * kLanes);
    uint32_t q[kLanes] = {};
    for (; at < end; at += kLanes)
      for (size_t j = 0; j < kLanes; ++j) {
        const uint16_t v = p[at + j];
        acc[at + j] = uint16_t(acc[at + j] + v);
        q[j] += uint16_t(v * v);
      }
    for (size_t j = 0; j < kLanes; ++j) sq[j % C] += q[j];
  }
  for (; at < bytes; ++at) acc[at] = uint16_t(acc[at] + p[at]), sq[at % C] += uint64_t(p[at]) * p[at];
}

// 16-bit per-pixel counters take this many samples of at most 255 each.
constexpr unsigned kFoldEvery = 65535 / 255;

}  // namespace

DatasetSums::DatasetSums(size_t classes, const ImageShape& shape)
    : class_counts(classes, 0), channel_sum(shape.channels, 0), channel_sq(shape.channels, 0),
      pixel_sum(shape.bytes(), 0) {}

void DatasetSums::merge(const DatasetSums& o) {
  if (o.class_counts.size() != class_counts.size() || o.pixel_sum.size() != pixel_sum.size() ||
      o.channel_sum.size() != channel_sum.size())
    fail("internal: statistics of different shapes merged");
  for (size_t k = 0; k < class_counts.size(); ++k) class_counts[k] += o.class_counts[k];
  for (size_t k = 0; k < channel_sum.size(); ++k) channel_sum[k] += o.channel_sum[k], channel_sq[k] += o.channel_sq[k];
  for (size_t k = 0; k < pixel_sum.size(); ++k) pixel_sum[k] += o.pixel_sum[k];
  samples += o.samples;
  pixels += o.pixels;
}

void DatasetSums::reduce_to_root(const MpiContext& mpi) {
  if (mpi.size() == 1) return;
  for (std::vector<uint64_t>* v : {&class_counts, &channel_sum, &channel_sq, &pixel_sum}) {
    std::vector<uint64_t> total(v->size(), 0);
    CONVOY_MPI_CHECK(MPI_Reduce(v->data(), total.data(), int(v->size()), MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD));
    if (mpi.rank() == 0) *v = std::move(total);
  }
  uint64_t mine[2] = {samples, pixels}, total[2] = {0, 0};
  CONVOY_MPI_CHECK(MPI_Reduce(mine, total, 2, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD));
  if (mpi.rank() == 0) samples = total[0], pixels = total[1];
}

namespace {

// The pixels the channel sums count: every sample's (one shape) or their own sizes added up.
uint64_t counted_pixels(const DatasetSums& s) {
  if (s.pixel_sum.empty()) return s.pixels;
  return s.samples * (s.pixel_sum.size() / std::max<size_t>(1, s.channel_sum.size()));
}

}  // namespace

std::vector<double> DatasetSums::mean() const {
  std::vector<double> m(channel_sum.size(), 0.0);
  const uint64_t n = counted_pixels(*this);
  for (size_t c = 0; c < m.size() && n > 0; ++c) m[c] = double(channel_sum[c]) / double(n);
  return m;
}

std::vector<double> DatasetSums::stddev() const {
  std::vector<double> s(channel_sum.size(), 0.0);
  const uint64_t n = counted_pixels(*this);
  for (size_t c = 0; c < s.size() && n > 0; ++c) {
    // n * sum(x^2) - (sum x)^2, exactly, in 128-bit integers.
    const unsigned __int128 a = (unsigned __int128)n * channel_sq[c];
    const unsigned __int128 b = (unsigned __int128)channel_sum[c] * channel_sum[c];
    const long double var_n2 = (long double)(a - b);
    s[c] = double(std::sqrt(var_n2) / (long double)n);
  }
  return s;
}

SampleSums::SampleSums(size_t classes, const ImageShape& shape) : totals_(classes, shape), pixel_(shape.bytes(), 0) {}

void SampleSums::add(const uint8_t* px, int32_t label) {
  if (label < 0 || size_t(label) >= totals_.class_counts.size()) fail("internal: label out of range in statistics");
  ++totals_.class_counts[size_t(label)];
  ++totals_.samples;
  uint64_t* sq = totals_.channel_sq.data();
  switch (totals_.channel_sq.size()) {
    case 1: add_sample_sums<1>(px, pixel_.size(), pixel_.data(), sq); break;
    case 3: add_sample_sums<3>(px, pixel_.size(), pixel_.data(), sq); break;
    default: fail("internal: statistics for 1 or 3 channels only");
  }
  if (++unfolded_ == kFoldEvery) fold();
}

// Exact 64-bit sums per sample: a sample of 2^24 pixels of 255^2 stays far below 2^64.
void SampleSums::add_varied(const uint8_t* px, size_t bytes, int32_t label) {
  if (label < 0 || size_t(label) >= totals_.class_counts.size()) fail("internal: label out of range in statistics");
  const size_t c = totals_.channel_sum.size();
  if (c == 0 || bytes % c != 0) fail("internal: a sample's bytes are not whole pixels");
  ++totals_.class_counts[size_t(label)];
  ++totals_.samples;
  totals_.pixels += bytes / c;
  uint64_t sum[4] = {}, sq[4] = {};
  for (size_t k = 0; k < bytes; k += c)
    for (size_t ch = 0; ch < c; ++ch) {
      const uint32_t v = px[k + ch];
      sum[ch] += v;
      sq[ch] += v * v;
    }
  for (size_t ch = 0; ch < c; ++ch) totals_.channel_sum[ch] += sum[ch], totals_.channel_sq[ch] += sq[ch];
}

void SampleSums::fold() {
  const size_t c = totals_.channel_sum.size();
  for (size_t k = 0; k < pixel_.size(); k += c)
    for (size_t ch = 0; ch < c; ++ch) {
      totals_.pixel_sum[k + ch] += pixel_[k + ch];
      totals_.channel_sum[ch] += pixel_[k + ch];
    }
  std::fill(pixel_.begin(), pixel_.end(), uint16_t{0});
  unfolded_ = 0;
}

const DatasetSums& SampleSums::totals() {
  if (unfolded_ > 0) fold();
  return totals_;
}

std::vector<uint8_t> DatasetSums::mean_image() const {
  std::vector<uint8_t> img(pixel_sum.size(), 0);
  if (samples == 0) return img;
  for (size_t k = 0; k < img.size(); ++k) img[k] = uint8_t((pixel_sum[k] + samples / 2) / samples);
  return img;
}

}  // namespace convoy::datagen
