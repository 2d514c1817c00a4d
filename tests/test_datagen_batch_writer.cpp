// The batch writer: files byte-identical to write_batch_file with their dataset.json entries (also
// when parts of them are written first, and when those parts must be written anew), kept files left
// untouched, the bound on files in memory (and the flush before blocking on it), buffers
// handed back for reuse, and a write error thrown to the threads that go on.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
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
    w.submit(b, raw_batch(b, 3 + b, uint8_t(b)));
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

// A file of 3,000 samples of 4 KiB: parts of it written while it is "made", then the rest.
TEST(BatchWriter, PartsWrittenEarlyGiveTheSameFile) {
  const std::string dir = scratch("parts"), ref = scratch("parts_ref");
  Batch batch = raw_batch(3, 3000, 0);
  batch.shape = {32, 32, 4};
  batch.images.resize(3000 * batch.shape.bytes());
  for (size_t i = 0; i < batch.images.size(); ++i) batch.images[i] = uint8_t(i * 7 + i / 4096);
  const uint32_t crc = write_batch_file(join_path(ref, batch_file_name(3)), batch);
  MadeFile f;
  f.b = 3;
  f.header = batch_layout(batch.shape, Encoding::raw, 3, 3000, batch.images.size());
  f.bytes.reserve(f.header.file_bytes);
  std::memcpy(f.bytes.data() + f.header.images_offset, batch.images.data(), batch.images.size());
  BatchWriter w(dir, 2, 3);
  w.begin_file();
  f.parts_from = direct_aligned(f.header.images_offset);
  f.parts_to = f.parts_from + 5 * 4096 * 100;
  for (uint64_t at = f.parts_from; at < f.parts_to; at += 4096 * 100) w.write_part(3, f.bytes.data(), at, 4096 * 100);
  seal_batch_in_place(f.bytes.data(), f.header, batch.labels.data(), batch.ids.data(), nullptr, nullptr);
  w.submit(std::move(f));
  w.finish();
  const auto written = w.take_written();
  ASSERT_EQ(written.size(), 1u);
  EXPECT_EQ(written[0].second.crc32c, crc);
  EXPECT_EQ(read_whole_file(join_path(dir, batch_file_name(3))), read_whole_file(join_path(ref, batch_file_name(3))));
  for (const auto& e : std::filesystem::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string(), batch_file_name(3));  // no temporary left behind
}

// Parts written under a layout that then changed (a sample rejected late): the file is written
// anew, whole, and nothing of the parts remains.
TEST(BatchWriter, AFileWithoutItsPartsIsWrittenAnew) {
  const std::string dir = scratch("reparts"), ref = scratch("reparts_ref");
  const Batch batch = raw_batch(4, 5, 9);
  write_batch_file(join_path(ref, batch_file_name(4)), batch);
  std::vector<uint8_t> junk(8 * 4096, 0xee);
  FileBuffer aligned;
  aligned.reserve(junk.size());
  std::memcpy(aligned.data(), junk.data(), junk.size());
  BatchWriter w(dir, 2, 2);
  w.begin_file();
  w.write_part(4, aligned.data(), 4096, 7 * 4096);  // a file far longer than the one that follows
  w.submit(4, batch);
  w.finish();
  EXPECT_EQ(read_whole_file(join_path(dir, batch_file_name(4))), read_whole_file(join_path(ref, batch_file_name(4))));
}

TEST(BatchWriter, AKeptFileIsNotWrittenAgain) {
  const std::string dir = scratch("kept");
  const uint32_t crc = write_batch_file(join_path(dir, batch_file_name(7)), raw_batch(7, 2, 1));
  BatchWriter w(dir, 2, 1);
  w.begin_file();
  w.submit_kept(7);  // nothing of it may reach the disk
  w.finish();
  const auto written = w.take_written();
  ASSERT_EQ(written.size(), 1u);
  EXPECT_EQ(written[0].second.crc32c, crc);
  EXPECT_EQ(read_batch_file(join_path(dir, batch_file_name(7))).images[0], 1);
}

TEST(BatchWriter, HoldsNoMoreFilesThanAllowedAndHandsBuffersBack) {
  const std::string dir = scratch("bound");
  BatchWriter w(dir, 2, 1);
  EXPECT_EQ(w.begin_file().capacity(), 0u);
  EXPECT_EQ(w.begin_file().capacity(), 0u);
  auto third = std::async(std::launch::async, [&] { return w.begin_file(); });
  EXPECT_EQ(third.wait_for(200ms), std::future_status::timeout);  // two held, none submitted
  w.submit(0, raw_batch(0, 4, 5));
  const FileBuffer reused = third.get();  // the written file's buffer, pages and all
  EXPECT_GE(reused.capacity(), 4 * 48u);
  w.submit(1, raw_batch(1, 1, 5));
  w.submit(2, raw_batch(2, 1, 5));
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
    w.submit(0, raw_batch(0, 2, 7));
  });
  EXPECT_EQ(flushes, 1);
  w.submit(1, raw_batch(1, 1, 7));
  w.submit(2, raw_batch(2, 1, 7));
  w.finish();
  EXPECT_EQ(w.take_written().size(), 3u);
}

TEST(BatchWriter, AWriteErrorReachesTheOtherThreads) {
  const std::string dir = scratch("error") + "/missing";  // no such folder: the write fails
  BatchWriter w(dir, 2, 1);
  w.begin_file();
  w.begin_file();
  w.submit(0, raw_batch(0, 1, 0));
  try {
    w.finish();
    FAIL() << "finish() after a failed write";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("batch_00000.cvb"), std::string::npos) << e.what();
  }
  EXPECT_THROW(w.begin_file(), std::exception);  // a waiter for a place is not left waiting
  EXPECT_THROW(w.submit(1, raw_batch(1, 1, 0)), std::exception);
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

// A batch of whole images at their own sizes (format v2) goes to disk as v2, dims and index with it.
TEST(BatchWriter, WholeImageBatchIsWrittenAsVersion2) {
  const std::string dir = scratch("whole"), ref = scratch("whole_ref");
  Batch b;
  b.version = kBatchVersion2;
  b.shape = {0, 0, 3};
  b.offsets = {0};
  for (uint32_t i = 0; i < 3; ++i) {
    b.labels.push_back(int32_t(i)), b.ids.push_back(int64_t(i));
    b.dims.insert(b.dims.end(), {2 + i, 5 - i});
    b.images.insert(b.images.end(), size_t(2 + i) * (5 - i) * 3, uint8_t(i));
    b.offsets.push_back(b.images.size());
  }
  BatchWriter w(dir, 2, 1);
  w.begin_file();
  w.submit(7, b);
  w.finish();
  const std::string name = batch_file_name(7);
  write_batch_file(join_path(ref, name), b);
  EXPECT_EQ(read_whole_file(join_path(dir, name)), read_whole_file(join_path(ref, name)));
  EXPECT_EQ(read_batch_file(join_path(dir, name)).dims, b.dims);
}
