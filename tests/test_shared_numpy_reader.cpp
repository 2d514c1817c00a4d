// scripts/batches.py (numpy only) reads exactly what the C++ writer wrote, and refuses what the C++
// reader refuses.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "shared/atomic_file.h"
#include "shared/batch_file.h"
#include "shared/dataset_meta.h"

using namespace convoy;

namespace {

const char* kPython = "/usr/bin/python3";

int run(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()); }

std::string make_dataset(const std::string& name, std::string* expected) {
  std::string dir = std::string(CONVOY_TEST_TMP) + "/numpy_" + name;
  std::filesystem::remove_all(dir);
  make_dirs(dir);
  DatasetMeta m;
  m.classes = {"zero", "one", "two"};
  m.class_counts = {0, 0, 0};
  m.shape = {6, 5, 3};
  m.per_file = 4;
  m.mean = {1, 2, 3};
  m.std = {1, 1, 1};
  uint32_t state = 12345;
  auto next = [&] { return state = state * 1664525u + 1013904223u; };
  for (uint32_t f = 0; f < 3; ++f) {
    Batch b;
    b.shape = m.shape;
    b.batch_index = f;
    size_t n = f == 2 ? 3 : 4;  // the last file holds fewer
    for (size_t i = 0; i < n; ++i) {
      b.labels.push_back(static_cast<int32_t>(next() % 3));
      b.ids.push_back(static_cast<int64_t>(next() % 1000000007));
      m.class_counts[b.labels.back()]++;
    }
    for (size_t i = 0; i < n * m.shape.bytes(); ++i) b.images.push_back(static_cast<uint8_t>(next() >> 24));
    char name_buf[32];
    std::snprintf(name_buf, sizeof name_buf, "batch_%05u.cvb", f);
    std::string path = join_path(dir, name_buf);
    uint32_t crc = write_batch_file(path, b);
    m.files.push_back({name_buf, static_cast<uint32_t>(n), std::filesystem::file_size(path), crc});
    m.num_samples += n;
    expected->append(reinterpret_cast<const char*>(b.labels.data()), n * 4);
    expected->append(reinterpret_cast<const char*>(b.ids.data()), n * 8);
    expected->append(reinterpret_cast<const char*>(b.images.data()), b.images.size());
  }
  write_dataset_meta(dir, m);
  return dir;
}

std::string reader() { return std::string(kPython) + " " + CONVOY_SOURCE_DIR + "/scripts/batches.py "; }

}  // namespace

TEST(NumpyReader, EqualsCppReader) {
  if (!file_exists(kPython) || run(std::string(kPython) + " -c 'import numpy'") != 0)
    GTEST_FAIL() << "/usr/bin/python3 with numpy is required (scripts/setup.sh installs python3-numpy)";
  std::string expected;
  const std::string dir = make_dataset("equal", &expected);
  const std::string dump = dir + "/dump.bin";
  ASSERT_EQ(run(reader() + dir + " --dump " + dump), 0);
  EXPECT_EQ(read_whole_file(dump), expected);
  // And the C++ reader agrees with what was written.
  Batch b = read_batch_file(dir + "/batch_00002.cvb");
  EXPECT_EQ(b.count(), 3u);
}

TEST(NumpyReader, RefusesCorruptAndTruncatedFiles) {
  std::string expected;
  const std::string dir = make_dataset("corrupt", &expected);
  const std::string victim = dir + "/batch_00001.cvb";
  std::string bytes = read_whole_file(victim);
  bytes[bytes.size() - 5] ^= 0x10;  // a pixel
  write_file_atomic(victim, bytes);
  EXPECT_NE(run(reader() + dir), 0);
  EXPECT_NE(check_batch_file(victim), "");

  bytes[bytes.size() - 5] ^= 0x10;
  write_file_atomic(victim, bytes.substr(0, bytes.size() - 100));
  EXPECT_NE(run(reader() + dir), 0);
  bytes.resize(bytes.size());
  write_file_atomic(victim, bytes);
  EXPECT_EQ(run(reader() + dir), 0);
}

// Format v2: each sample at its own size. The reader gives sample i as (h, w, C) and the same
// bytes as the C++ writer wrote; arrays() refuses in one line; a damaged dims section is named.
TEST(NumpyReader, ReadsWholeImagesOfTheirOwnSizes) {
  const std::string dir = std::string(CONVOY_TEST_TMP) + "/numpy_whole";
  std::filesystem::remove_all(dir);
  make_dirs(dir);
  DatasetMeta m;
  m.classes = {"zero", "one"};
  m.class_counts = {0, 0};
  m.shape = {0, 0, 3};
  m.resize = {true, 4, 6};
  m.per_file = 3;
  m.mean = {1, 2, 3};
  m.std = {1, 1, 1};
  Batch b;
  b.version = kBatchVersion2;
  b.shape = m.shape;
  b.offsets = {0};
  const uint32_t dims[3][2] = {{6, 4}, {4, 6}, {4, 4}};  // portrait, landscape, square
  for (uint32_t i = 0; i < 3; ++i) {
    b.labels.push_back(int32_t(i % 2));
    b.ids.push_back(int64_t(10 + i));
    m.class_counts[i % 2]++;
    b.dims.insert(b.dims.end(), {dims[i][0], dims[i][1]});
    for (uint32_t k = 0; k < dims[i][0] * dims[i][1] * 3; ++k) b.images.push_back(uint8_t(i * 50 + k));
    b.offsets.push_back(b.images.size());
  }
  const std::string path = join_path(dir, "batch_00000.cvb");
  const uint32_t crc = write_batch_file(path, b);
  m.files.push_back({"batch_00000.cvb", 3, std::filesystem::file_size(path), crc});
  m.num_samples = 3;
  write_dataset_meta(dir, m);
  std::string expected;
  expected.append(reinterpret_cast<const char*>(b.labels.data()), 12);
  expected.append(reinterpret_cast<const char*>(b.ids.data()), 24);
  expected.append(reinterpret_cast<const char*>(b.images.data()), b.images.size());
  ASSERT_EQ(run(reader() + dir + " --dump " + dir + "/dump.bin"), 0);
  EXPECT_EQ(read_whole_file(dir + "/dump.bin"), expected);
  const std::string py = std::string(kPython) + " -c 'import sys; sys.path.insert(0, \"" + CONVOY_SOURCE_DIR +
                         "/scripts\"); import batches; ds = batches.Dataset(\"" + dir + "\"); ";
  EXPECT_EQ(run(py +
                "bf = next(ds.files()); assert bf.image(0).shape == (6, 4, 3); assert bf.image(1).shape == (4, 6, 3); "
                "assert bf.image(1)[0, 0, 0] == 50; assert bf.dims.tolist() == [[6, 4], [4, 6], [4, 4]]'"),
            0);
  const std::string err = dir + "/err.txt";
  EXPECT_NE(std::system((py + "ds.arrays()' 2> " + err).c_str()), 0);
  const std::string why = read_whole_file(err);
  EXPECT_NE(why.find("images of varied sizes (format v2) fill no one array; use files() and each file"),
            std::string::npos)
      << why;
  // A flipped height: both readers name the file and the dims section.
  std::string bytes = read_whole_file(path);
  BatchHeader h;
  std::memcpy(&h, bytes.data(), sizeof h);
  bytes[h.dims_offset] ^= 0x01;
  write_file_atomic(path, bytes);
  EXPECT_EQ(check_batch_file(path), path + ": checksum mismatch in the dims section (file is corrupt)");
  EXPECT_NE(std::system((reader() + dir + " 2> " + err).c_str()), 0);
  EXPECT_NE(read_whole_file(err).find("batch_00000.cvb: checksum mismatch in the dims section"), std::string::npos)
      << read_whole_file(err);
}
