// Sums and their reduction. Mean and variance come from the integer totals in one place, so that
// floating-point summation order never enters the result.
#include "datagen/stats.h"

#include <cmath>

#include "datagen/image_codec.h"
#include "shared/error.h"

namespace convoy::datagen {

DatasetSums::DatasetSums(size_t classes, const ImageShape& shape)
    : class_counts(classes, 0),
      channel_sum(shape.channels, 0),
      channel_sq(shape.channels, 0),
      pixel_sum(shape.bytes(), 0) {}

void DatasetSums::add(const Batch& batch, ImageCodec& codec) {
  const size_t px = batch.shape.bytes(), c = batch.shape.channels;
  cv::Mat decoded;
  for (size_t i = 0; i < batch.count(); ++i) {
    const int32_t label = batch.labels[i];
    if (label < 0 || size_t(label) >= class_counts.size()) fail("internal: label out of range in statistics");
    ++class_counts[size_t(label)];
    const uint8_t* p = nullptr;
    if (batch.encoding == Encoding::raw) {
      p = batch.raw_image(i);
    } else {
      const uint64_t at = batch.offsets[i], end = batch.offsets[i + 1];
      DecodeLimits unlimited;
      decoded = codec.decode(batch.images.data() + at, size_t(end - at), int(c), 0, unlimited);
      if (decoded.total() * decoded.channels() != px || !decoded.isContinuous())
        fail("internal: a re-encoded sample decodes to the wrong size");
      p = decoded.data;
    }
    uint64_t sum[3] = {0, 0, 0}, sq[3] = {0, 0, 0};
    uint64_t* mean_px = pixel_sum.data();
    for (size_t k = 0; k < px; k += c)  // pixel by pixel, channel by channel: no division per byte
      for (size_t ch = 0; ch < c; ++ch) {
        const uint64_t v = p[k + ch];
        sum[ch] += v;
        sq[ch] += v * v;
        mean_px[k + ch] += v;
      }
    for (size_t ch = 0; ch < c; ++ch) {
      channel_sum[ch] += sum[ch];
      channel_sq[ch] += sq[ch];
    }
    ++samples;
  }
}

void DatasetSums::reduce_to_root(const MpiContext& mpi) {
  if (mpi.size() == 1) return;
  for (std::vector<uint64_t>* v : {&class_counts, &channel_sum, &channel_sq, &pixel_sum}) {
    std::vector<uint64_t> total(v->size(), 0);
    CONVOY_MPI_CHECK(MPI_Reduce(v->data(), total.data(), int(v->size()), MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD));
    if (mpi.rank() == 0) *v = std::move(total);
  }
  uint64_t total = 0;
  CONVOY_MPI_CHECK(MPI_Reduce(&samples, &total, 1, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD));
  if (mpi.rank() == 0) samples = total;
}

std::vector<double> DatasetSums::mean() const {
  std::vector<double> m(channel_sum.size(), 0.0);
  const uint64_t n = samples * (pixel_sum.size() / std::max<size_t>(1, channel_sum.size()));
  for (size_t c = 0; c < m.size() && n > 0; ++c) m[c] = double(channel_sum[c]) / double(n);
  return m;
}

std::vector<double> DatasetSums::stddev() const {
  std::vector<double> s(channel_sum.size(), 0.0);
  const uint64_t n = samples * (pixel_sum.size() / std::max<size_t>(1, channel_sum.size()));
  for (size_t c = 0; c < s.size() && n > 0; ++c) {
    // n * sum(x^2) - (sum x)^2, exactly, in 128-bit integers.
    const unsigned __int128 a = (unsigned __int128)n * channel_sq[c];
    const unsigned __int128 b = (unsigned __int128)channel_sum[c] * channel_sum[c];
    const long double var_n2 = (long double)(a - b);
    s[c] = double(std::sqrt(var_n2) / (long double)n);
  }
  return s;
}

std::vector<uint8_t> DatasetSums::mean_image() const {
  std::vector<uint8_t> img(pixel_sum.size(), 0);
  if (samples == 0) return img;
  for (size_t k = 0; k < img.size(); ++k) img[k] = uint8_t((pixel_sum[k] + samples / 2) / samples);
  return img;
}

}  // namespace convoy::datagen
