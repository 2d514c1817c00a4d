// The batch writer: files byte-identical to write_batch_file with their dataset.json entries, kept
// files left untouched, the bound on files in memory (and the flush before blocking on it), buffers
// handed back for reuse, and a write error thrown to the threads that go on.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <future>

#include "datagen/batch_writer.h"
#include "datagen/dataset_files.h"
#include "shared/atomic_file.h"

using namespace convoy;
using namespace convoy::datagen;
using namespace std::chrono_literals;

namespace {

std::string scratch(const std::string& name) {
  const std::string dir = std::string(CONVOY_TEST_TMP) + "/batch_writer_" + name;
  std::filesystem::remove_all(dir);
  make_dirs(dir);
  return dir;
}

Batch raw_batch(uint32_t index, size_t count, uint8_t fill) {
  Batch b;
  b.shape = {4, 4, 3};
  b.batch_index = index;
  for (size_t i = 0; i < count; ++i) b.labels.push_back(int32_t(i % 3)), b.ids.push_back(int64_t(index * 100 + i));
  b.images.assign(count * b.shape.bytes(), fill);
  return b;
}

}  // namespace

TEST(BatchWriter, WritesFilesAndReportsTheirEntries) {
  const std::string dir = scratch("write"), ref = scratch("write_ref");
  BatchWriter w(dir, 3, 2);
  for (uint32_t b = 0; b < 5; ++b) {
    w.begin_file();
    w.submit(b, raw_batch(b, 3 + b, uint8_t(b)), false);
  }
  w.finish();
  const auto written = w.take_written();
  ASSERT_EQ(written.size(), 5u);
  for (const auto& [b, e] : written) {
    const std::string name = batch_file_name(b);
    EXPECT_EQ(e.name, name);
    EXPECT_EQ(e.count, 3 + b);
    const uint32_t crc = write_batch_file(join_path(ref, name), raw_batch(uint32_t(b), 3 + b, uint8_t(b)));
    EXPECT_EQ(e.crc32c, crc);
    EXPECT_EQ(e.bytes, std::filesystem::file_size(join_path(dir, name)));
    EXPECT_EQ(read_whole_file(join_path(dir, name)), read_whole_file(join_path(ref, name)));
  }
  EXPECT_TRUE(w.take_written().empty());
  EXPECT_GT(w.write_seconds(), 0.0);
}

TEST(BatchWriter, AKeptFileIsNotWrittenAgain) {
  const std::string dir = scratch("kept");
  const uint32_t crc = write_batch_file(join_path(dir, batch_file_name(7)), raw_batch(7, 2, 1));
  BatchWriter w(dir, 2, 1);
  w.begin_file();
  w.submit(7, raw_batch(7, 2, 99), true);  // other pixels: must not reach the disk
  w.finish();
  const auto written = w.take_written();
  ASSERT_EQ(written.size(), 1u);
  EXPECT_EQ(written[0].second.crc32c, crc);
  EXPECT_EQ(read_batch_file(join_path(dir, batch_file_name(7))).images[0], 1);
}

TEST(BatchWriter, HoldsNoMoreFilesThanAllowedAndHandsBuffersBack) {
  const std::string dir = scratch("bound");
  BatchWriter w(dir, 2, 1);
  EXPECT_TRUE(w.begin_file().empty());
  EXPECT_TRUE(w.begin_file().empty());
  auto third = std::async(std::launch::async, [&] { return w.begin_file(); });
  EXPECT_EQ(third.wait_for(200ms), std::future_status::timeout);  // two held, none submitted
  w.submit(0, raw_batch(0, 4, 5), false);
  const std::vector<uint8_t> reused = third.get();  // the written file's buffer, pages and all
  EXPECT_EQ(reused.size(), 4 * 48u);
  w.submit(1, raw_batch(1, 1, 5), false);
  w.submit(2, raw_batch(2, 1, 5), false);
  w.finish();
  EXPECT_EQ(w.take_written().size(), 3u);
}

// A thread that would block first runs its flush, which may itself finish a held file (as a GPU
// lane's delivery does): the wait then ends without anyone else submitting.
TEST(BatchWriter, BeginFileFlushesBeforeItBlocks) {
  const std::string dir = scratch("flush");
  BatchWriter w(dir, 2, 1);
  int flushes = 0;
  w.begin_file([&] { ++flushes; });
  w.begin_file([&] { ++flushes; });
  EXPECT_EQ(flushes, 0);  // room for both: no flush
  w.begin_file([&] {
    ++flushes;
    w.submit(0, raw_batch(0, 2, 7), false);
  });
  EXPECT_EQ(flushes, 1);
  w.submit(1, raw_batch(1, 1, 7), false);
  w.submit(2, raw_batch(2, 1, 7), false);
  w.finish();
  EXPECT_EQ(w.take_written().size(), 3u);
}

TEST(BatchWriter, AWriteErrorReachesTheOtherThreads) {
  const std::string dir = scratch("error") + "/missing";  // no such folder: the write fails
  BatchWriter w(dir, 2, 1);
  w.begin_file();
  w.begin_file();
  w.submit(0, raw_batch(0, 1, 0), false);
  try {
    w.finish();
    FAIL() << "finish() after a failed write";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("batch_00000.cvb"), std::string::npos) << e.what();
  }
  EXPECT_THROW(w.begin_file(), std::exception);  // a waiter for a place is not left waiting
  EXPECT_THROW(w.submit(1, raw_batch(1, 1, 0), false), std::exception);
  EXPECT_TRUE(w.take_written().empty());
}

TEST(BatchWriter, StopEndsTheRun) {
  BatchWriter w(scratch("stop"), 2, 1);
  w.begin_file();
  w.begin_file();
  auto waiter = std::async(std::launch::async, [&] { return w.begin_file(); });
  EXPECT_EQ(waiter.wait_for(100ms), std::future_status::timeout);
  w.stop("a sample could not be read");
  EXPECT_THROW(waiter.get(), std::exception);
  EXPECT_THROW(w.finish(), std::exception);
}
