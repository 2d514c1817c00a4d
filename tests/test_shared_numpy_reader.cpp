// scripts/batches.py (numpy only) reads exactly what the C++ writer wrote, and refuses what the C++
// reader refuses.
#include <gtest/gtest.h>

#include <cstdio>
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
