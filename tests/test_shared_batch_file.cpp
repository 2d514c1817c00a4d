// Batch-file formats v1 and v2: round trip (raw and JPEG layouts; v2 with each sample's own size),
// every flipped byte and every truncation refused with a message naming the file, and
// dataset.json validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "shared/atomic_file.h"
#include "shared/batch_file.h"
#include "shared/crc32c.h"
#include "shared/dataset_meta.h"
#include "shared/error.h"

using namespace convoy;

namespace {

std::string scratch(const std::string& name) {
  std::string dir = std::string(CONVOY_TEST_TMP) + "/shared_" + name;
  std::filesystem::remove_all(dir);
  make_dirs(dir);
  return dir;
}

Batch random_raw_batch(size_t n, ImageShape shape, uint32_t seed) {
  std::mt19937 rng(seed);
  Batch b;
  b.shape = shape;
  b.batch_index = seed;
  for (size_t i = 0; i < n; ++i) {
    b.labels.push_back(static_cast<int32_t>(rng() % 10));
    b.ids.push_back(static_cast<int64_t>(rng() % 100000));
  }
  b.images.resize(n * shape.bytes());
  for (auto& px : b.images) px = static_cast<uint8_t>(rng());
  return b;
}

Batch random_jpeg_batch(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  Batch b;
  b.shape = {8, 8, 3};
  b.encoding = Encoding::jpeg;
  b.offsets.push_back(0);
  for (size_t i = 0; i < n; ++i) {
    b.labels.push_back(static_cast<int32_t>(i));
    b.ids.push_back(static_cast<int64_t>(1000 + i));
    size_t len = 1 + rng() % 50;  // the format stores the bytes; what they hold is the loader's concern
    for (size_t k = 0; k < len; ++k) b.images.push_back(static_cast<uint8_t>(rng()));
    b.offsets.push_back(b.images.size());
  }
  return b;
}

// Format v2: each sample its own height and width (portrait, landscape, square), raw or JPEG.
Batch random_whole_batch(size_t n, Encoding encoding, uint32_t seed) {
  std::mt19937 rng(seed);
  Batch b;
  b.version = kBatchVersion2;
  b.shape = {0, 0, 3};
  b.encoding = encoding;
  b.batch_index = seed;
  b.offsets.push_back(0);
  for (size_t i = 0; i < n; ++i) {
    b.labels.push_back(static_cast<int32_t>(rng() % 10));
    b.ids.push_back(static_cast<int64_t>(rng() % 100000));
    const uint32_t h = 1 + rng() % 9, w = 1 + rng() % 9;
    b.dims.insert(b.dims.end(), {h, w});
    const size_t len = encoding == Encoding::raw ? size_t(h) * w * 3 : 1 + rng() % 50;
    for (size_t k = 0; k < len; ++k) b.images.push_back(static_cast<uint8_t>(rng()));
    b.offsets.push_back(b.images.size());
  }
  return b;
}

void expect_equal(const Batch& a, const Batch& b) {
  EXPECT_EQ(a.version, b.version);
  EXPECT_EQ(a.dims, b.dims);
  EXPECT_EQ(a.shape, b.shape);
  EXPECT_EQ(a.encoding, b.encoding);
  EXPECT_EQ(a.batch_index, b.batch_index);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.images, b.images);
  EXPECT_EQ(a.offsets, b.offsets);
}

std::string error_of(const std::string& path, const std::vector<uint8_t>& bytes) {
  try {
    decode_batch(path, bytes.data(), bytes.size());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  // Extending in pieces equals one pass (the SSE path handles odd lengths and offsets).
  std::string s(1000, 'x');
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>(i * 7);
  uint32_t whole = crc32c(s.data(), s.size());
  uint32_t parts = crc32c(s.data() + 3, s.size() - 3, crc32c(s.data(), 3));
  EXPECT_EQ(whole, parts);
}

// Bit by bit from the definition, to hold the fast paths to.
uint32_t crc32c_bitwise(const uint8_t* p, size_t n, uint32_t crc) {
  uint32_t c = ~crc;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
  }
  return ~c;
}

TEST(Crc32c, LongBuffersMatchTheDefinition) {
  // Lengths around the interleaved block sizes (3 x 256 and 3 x 8192 bytes), from odd offsets.
  std::mt19937 rng(5);
  std::vector<uint8_t> buf(74727 + 7);  // the longest length below, from the largest offset
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t n : {767u, 768u, 769u, 1543u, 24575u, 24576u, 24577u, 25351u, 49152u, 60000u, 74727u}) {
    for (size_t off : {0u, 1u, 7u}) {
      const uint8_t* p = buf.data() + off;
      EXPECT_EQ(crc32c(p, n), crc32c_bitwise(p, n, 0)) << n << " bytes at offset " << off;
      EXPECT_EQ(crc32c(p, n, 0x12345678u), crc32c_bitwise(p, n, 0x12345678u)) << n << " bytes, extended";
    }
  }
}

TEST(Crc32c, AppendJoinsPiecesChecksums) {
  std::mt19937 rng(3);
  for (size_t piece : {1u, 7u, 64u, 4096u, 49152u, 196608u}) {
    std::vector<uint8_t> data(piece * 5);
    for (auto& b : data) b = uint8_t(rng());
    const Crc32cAppend append(piece);
    uint32_t joined = 0;  // crc32c of nothing
    for (size_t k = 0; k < 5; ++k) joined = append(joined, crc32c(data.data() + k * piece, piece));
    EXPECT_EQ(joined, crc32c(data.data(), data.size())) << piece;
  }
}

// A file built in place (the images written first, the rest sealed around them) is the file
// encode_batch makes of the same batch, raw and JPEG, with the images' CRC given or computed.
TEST(BatchFile, SealedInPlaceIsTheEncodedBytes) {
  for (const Batch& b :
       {random_raw_batch(37, {5, 7, 3}, 4), random_jpeg_batch(23, 5), random_raw_batch(0, {2, 2, 1}, 6),
        random_whole_batch(11, Encoding::raw, 3), random_whole_batch(7, Encoding::jpeg, 4)}) {
    BatchHeader h = batch_layout(b.shape, b.encoding, b.batch_index, b.count(), b.images.size(), b.version);
    for (bool given : {false, true}) {
      std::vector<uint8_t> file(h.file_bytes, 0xab);  // what the padding held before must not matter
      if (!b.images.empty()) std::memcpy(file.data() + h.images_offset, b.images.data(), b.images.size());
      const uint32_t crc = crc32c(b.images.data(), b.images.size());
      const bool indexed = b.encoding == Encoding::jpeg || b.version == kBatchVersion2;
      seal_batch_in_place(file.data(), h, b.labels.data(), b.ids.data(), indexed ? b.offsets.data() : nullptr,
                          given ? &crc : nullptr, b.version == kBatchVersion2 ? b.dims.data() : nullptr);
      EXPECT_EQ(file, encode_batch(b)) << b.count() << " samples, CRC given: " << given;
    }
  }
}

TEST(BatchFile, RawRoundTrip) {
  const std::string dir = scratch("raw");
  Batch b = random_raw_batch(17, {5, 7, 3}, 42);
  const std::string path = join_path(dir, "batch_00000.cvb");
  uint32_t crc = write_batch_file(path, b);
  Batch r = read_batch_file(path);
  expect_equal(b, r);
  EXPECT_EQ(read_batch_header(path).header_crc, crc);
  uint32_t checked = 0;
  EXPECT_EQ(check_batch_file(path, &checked), "");
  EXPECT_EQ(checked, crc);
  EXPECT_EQ(r.raw_image(3)[4], b.images[3 * 105 + 4]);  // sample i at i * H*W*C: O(1) access
}

TEST(BatchFile, JpegLayoutRoundTrip) {
  const std::string dir = scratch("jpeg");
  Batch b = random_jpeg_batch(9, 7);
  const std::string path = join_path(dir, "batch_00001.cvb");
  write_batch_file(path, b);
  expect_equal(b, read_batch_file(path));
}

TEST(BatchFile, WholeImagesRoundTripRawAndJpeg) {
  const std::string dir = scratch("whole");
  for (const Encoding e : {Encoding::raw, Encoding::jpeg}) {
    const Batch b = random_whole_batch(13, e, 8);
    const std::string path = join_path(dir, "batch_00002.cvb");
    write_batch_file(path, b);
    const Batch r = read_batch_file(path);
    expect_equal(b, r);
    const std::string bytes = read_whole_file(path);
    const BatchView v = verify_batch(path, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    EXPECT_TRUE(v.varied());
    for (size_t i = 0; i < b.count(); ++i) {
      EXPECT_EQ(v.sample_shape(i), (ImageShape{b.dims[2 * i], b.dims[2 * i + 1], 3}));
      EXPECT_EQ(v.sample_bytes(i), b.offsets[i + 1] - b.offsets[i]);
      EXPECT_EQ(v.sample(i), v.images() + b.offsets[i]);
    }
    if (e == Encoding::raw) EXPECT_EQ(r.raw_image(5), r.images.data() + b.offsets[5]);
  }
}

// The dims section is under its own CRC: a changed height is caught and named, and one whose CRCs
// were made to agree still fails the raw sample's byte count.
TEST(BatchFile, DamagedWholeImageDimsAreDetected) {
  const Batch b = random_whole_batch(6, Encoding::raw, 9);
  std::vector<uint8_t> bytes = encode_batch(b);
  BatchHeader h;
  std::memcpy(&h, bytes.data(), sizeof h);
  EXPECT_EQ(h.version, kBatchVersion2);
  EXPECT_EQ(h.dims_offset % kBatchAlign, 0u);
  bytes[h.dims_offset + 8] ^= 0x04;  // sample 1's height
  EXPECT_EQ(error_of("w.cvb", bytes), "w.cvb: checksum mismatch in the dims section (file is corrupt)");
  const uint64_t dims_end = h.index_offset;
  h.dims_crc = crc32c(bytes.data() + h.dims_offset, dims_end - h.dims_offset);
  h.header_crc = crc32c(&h, offsetof(BatchHeader, header_crc));
  std::memcpy(bytes.data(), &h, sizeof h);
  const std::string why = error_of("w.cvb", bytes);
  EXPECT_EQ(why.rfind("w.cvb: sample 1's bytes do not match its ", 0), 0u) << why;
  EXPECT_EQ(why.find('\n'), std::string::npos);
}

TEST(BatchFile, WrittenFileIsTheEncodedBytes) {
  // write_batch_file streams the sections from the batch's buffers; the file must be exactly
  // what encode_batch lays out, padding and CRCs included.
  const std::string dir = scratch("written");
  Batch empty;
  empty.shape = {4, 4, 1};
  for (const Batch& b :
       {random_raw_batch(17, {5, 7, 3}, 42), random_raw_batch(1, {1, 1, 1}, 3), random_jpeg_batch(9, 7), empty,
        random_whole_batch(5, Encoding::raw, 2), random_whole_batch(0, Encoding::jpeg, 1)}) {
    const std::string path = join_path(dir, "b.cvb");
    write_batch_file(path, b);
    const std::vector<uint8_t> want = encode_batch(b);
    const std::string got = read_whole_file(path);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_TRUE(std::equal(want.begin(), want.end(), reinterpret_cast<const uint8_t*>(got.data())));
  }
}

TEST(BatchFile, EmptyBatchRoundTrip) {
  Batch b;
  b.shape = {4, 4, 1};
  std::vector<uint8_t> bytes = encode_batch(b);
  Batch r = decode_batch("empty", bytes.data(), bytes.size());
  EXPECT_EQ(r.count(), 0u);
}

TEST(BatchFile, SectionsAreAligned) {
  std::vector<uint8_t> bytes = encode_batch(random_raw_batch(3, {2, 2, 1}, 1));
  BatchHeader h;
  std::memcpy(&h, bytes.data(), sizeof h);
  for (uint64_t off : {h.labels_offset, h.ids_offset, h.index_offset, h.images_offset})
    EXPECT_EQ(off % kBatchAlign, 0u);
}

TEST(BatchFile, EveryFlippedByteIsDetected) {
  for (Batch b : {random_raw_batch(3, {3, 3, 3}, 5), random_jpeg_batch(4, 9), random_whole_batch(3, Encoding::raw, 6),
                  random_whole_batch(3, Encoding::jpeg, 7)}) {
    const std::vector<uint8_t> good = encode_batch(b);
    ASSERT_EQ(error_of("f.cvb", good), "");
    for (size_t i = 0; i < good.size(); ++i) {
      for (uint8_t mask : {0x01, 0x80}) {
        std::vector<uint8_t> bad = good;
        bad[i] ^= mask;
        std::string why = error_of("f.cvb", bad);
        ASSERT_FALSE(why.empty()) << "flip of byte " << i << " went unnoticed";
        EXPECT_EQ(why.rfind("f.cvb: ", 0), 0u) << why;
      }
    }
  }
}

// The header checksum covers the reserved bytes, so a file whose reserved bytes are set and whose
// checksum agrees is refused for them by name (it would not re-encode to the same bytes).
TEST(BatchFile, NonZeroReservedHeaderBytesAreRefused) {
  std::vector<uint8_t> bytes = encode_batch(random_raw_batch(3, {3, 3, 3}, 5));
  BatchHeader h;
  std::memcpy(&h, bytes.data(), sizeof h);
  h.reserved[7] = 0xcf;
  h.header_crc = crc32c(&h, offsetof(BatchHeader, header_crc));
  std::memcpy(bytes.data(), &h, sizeof h);
  const std::string why = error_of("r.cvb", bytes);
  EXPECT_NE(why.find("r.cvb: non-zero reserved header bytes"), std::string::npos) << why;
}

TEST(BatchFile, EveryTruncationIsRefused) {
  for (const Batch& b : {random_raw_batch(4, {4, 4, 3}, 3), random_whole_batch(4, Encoding::raw, 3)}) {
    const std::vector<uint8_t> good = encode_batch(b);
    for (size_t len = 0; len < good.size(); ++len) {
      std::vector<uint8_t> cut(good.begin(), good.begin() + static_cast<long>(len));
      std::string why = error_of("t.cvb", cut);
      ASSERT_FALSE(why.empty()) << "truncation at " << len;
      if (len >= sizeof(BatchHeader)) EXPECT_NE(why.find("truncated"), std::string::npos) << why;
    }
  }
}

TEST(BatchFile, TruncatedFileOnDiskNamesFileAndProblem) {
  const std::string dir = scratch("trunc");
  const std::string path = join_path(dir, "batch_00000.cvb");
  write_batch_file(path, random_raw_batch(8, {4, 4, 3}, 11));
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 10);
  try {
    read_batch_file(path);
    FAIL() << "truncated file was accepted";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind(path + ": truncated", 0), 0u) << msg;
  }
  EXPECT_THROW(read_batch_header(path), Error);
  EXPECT_NE(check_batch_file(path), "");
}

TEST(BatchFile, AtomicWriteLeavesNoTemporaryFiles) {
  const std::string dir = scratch("atomic");
  write_batch_file(join_path(dir, "b.cvb"), random_raw_batch(2, {2, 2, 1}, 2));
  size_t n = 0;
  for (auto& e : std::filesystem::directory_iterator(dir)) {
    (void)e;
    ++n;
  }
  EXPECT_EQ(n, 1u);
  {
    AtomicFile f(join_path(dir, "never.cvb"));
    f.write("x", 1);
  }  // destroyed without commit: nothing may appear under either name
  EXPECT_FALSE(file_exists(join_path(dir, "never.cvb")));
  n = 0;
  for (auto& e : std::filesystem::directory_iterator(dir)) {
    (void)e;
    ++n;
  }
  EXPECT_EQ(n, 1u);
}

TEST(DatasetMeta, RoundTripAndValidation) {
  const std::string dir = scratch("meta");
  DatasetMeta m;
  m.classes = {"a", "b"};
  m.class_counts = {2, 1};
  m.num_samples = 3;
  m.shape = {4, 4, 3};
  m.per_file = 2;
  m.mean = {1, 2, 3};
  m.std = {4, 5, 6};
  m.files = {{"batch_00000.cvb", 2, 100, 7}, {"batch_00001.cvb", 1, 90, 8}};
  write_dataset_meta(dir, m);
  DatasetMeta r = read_dataset_meta(dir);
  EXPECT_EQ(to_json(r), to_json(m));

  auto j = to_json(m);
  j["num_samples"] = 4;
  EXPECT_THROW(dataset_from_json(j, "x"), Error);
  j = to_json(m);
  j["files"][0]["name"] = "../escape.cvb";
  EXPECT_THROW(dataset_from_json(j, "x"), Error);
  j = to_json(m);
  j.erase("classes");
  try {
    dataset_from_json(j, "d/dataset.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("d/dataset.json: missing field 'classes'"), std::string::npos);
  }
  EXPECT_THROW(read_dataset_meta(scratch("nometa")), Error);
}

TEST(DatasetMeta, WholeImagesRecordTheirResizeNotAShape) {
  DatasetMeta m;
  m.classes = {"a"};
  m.class_counts = {1};
  m.num_samples = 1;
  m.shape = {0, 0, 3};
  m.resize = {true, 256, 512};
  m.per_file = 2;
  m.mean = {1, 2, 3};
  m.std = {4, 5, 6};
  m.files = {{"batch_00000.cvb", 1, 100, 7}};
  const auto j = to_json(m);
  EXPECT_EQ(j["format_version"], 2);
  EXPECT_EQ(j["image"], (nlohmann::json{{"resize", "short"}, {"short", 256}, {"max_side", 512}, {"channels", 3}}));
  const DatasetMeta r = dataset_from_json(j, "x");
  EXPECT_TRUE(r.resize.varied);
  EXPECT_EQ(r.resize.short_side, 256u);
  EXPECT_EQ(r.resize.max_side, 512u);
  EXPECT_EQ(r.shape, (ImageShape{0, 0, 3}));
  EXPECT_EQ(to_json(r), j);
  auto bad = j;
  bad["image"]["short"] = 0;
  EXPECT_THROW(dataset_from_json(bad, "x"), Error);
  bad = j;
  bad["format_version"] = 3;
  EXPECT_THROW(dataset_from_json(bad, "x"), Error);
}
