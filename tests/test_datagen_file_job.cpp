// A batch file made sample by sample by several threads in any order, its finished stretches
// written while the rest is made: the file on disk is byte-identical to write_batch_file's of the
// same samples, with or without rejected samples (which move the later ones), raw and JPEG.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <thread>

#include "datagen/batch_writer.h"
#include "datagen/dataset_files.h"
#include "datagen/file_job.h"
#include "shared/atomic_file.h"
#include "shared/crc32c.h"

using namespace convoy;
using namespace convoy::datagen;

namespace {

std::string scratch(const std::string& name) {
  const std::string dir = std::string(CONVOY_TEST_TMP) + "/file_job_" + name;
  std::filesystem::remove_all(dir);
  make_dirs(dir);
  return dir;
}

InputIndex index_of(size_t n) {
  InputIndex index;
  index.classes = {"a", "b", "c"};
  for (size_t i = 0; i < n; ++i) index.entries.push_back({0, 0, 1, int32_t(i % 3), "x"});
  return index;
}

uint8_t pixel(uint64_t id, size_t k) { return uint8_t(id * 31 + k * 7 + k / 4096); }

// Makes file b of the samples `ids` with `threads` threads taking slots in a shuffled order;
// `reject` says which slots are refused. Returns the file as written and the reference bytes.
std::pair<std::string, std::string> make(const std::string& name, Encoding enc, const std::vector<uint64_t>& ids,
                                         const std::vector<bool>& reject, int threads) {
  const std::string dir = scratch(name), ref = scratch(name + "_ref");
  const ImageShape shape{64, 64, 3};
  const InputIndex index = index_of(1000000);
  const Crc32cAppend append(shape.bytes());
  BatchWriter writer(dir, 2, 2);
  FileJob job(5, ids, writer.begin_file(), shape, enc, &writer, &append);
  std::vector<size_t> order(ids.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937(7));
  std::atomic<size_t> next{0}, last{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (size_t k; (k = next.fetch_add(1)) < order.size();) {
        const size_t i = order[k];
        const SlotOut out = job.slot(i);
        if (reject[i]) {
          job.reject(i, "refused");
        } else if (out.raw) {
          for (size_t p = 0; p < shape.bytes(); ++p) out.raw[p] = pixel(ids[i], p);
          *out.crc = crc32c(out.raw, shape.bytes());
        } else {
          out.encoded->assign(100 + ids[i] % 50, uint8_t(ids[i]));
        }
        if (job.sample_done(i)) last.fetch_add(1);
      }
    });
  for (auto& t : pool) t.join();
  EXPECT_EQ(last.load(), 1u);
  std::vector<std::pair<uint64_t, std::string>> rejected;
  writer.submit(job.assemble(index, rejected));
  writer.finish();

  Batch batch;
  batch.shape = shape;
  batch.encoding = enc;
  batch.batch_index = 5;
  if (enc == Encoding::jpeg) batch.offsets.push_back(0);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (reject[i]) continue;
    batch.labels.push_back(index.entries[ids[i]].label);
    batch.ids.push_back(int64_t(ids[i]));
    if (enc == Encoding::raw) {
      for (size_t p = 0; p < shape.bytes(); ++p) batch.images.push_back(pixel(ids[i], p));
    } else {
      batch.images.insert(batch.images.end(), 100 + ids[i] % 50, uint8_t(ids[i]));
      batch.offsets.push_back(batch.images.size());
    }
  }
  EXPECT_EQ(rejected.size(), ids.size() - batch.count());
  write_batch_file(join_path(ref, batch_file_name(5)), batch);
  return {read_whole_file(join_path(dir, batch_file_name(5))), read_whole_file(join_path(ref, batch_file_name(5)))};
}

std::vector<uint64_t> some_ids(size_t n) {
  std::vector<uint64_t> ids(n);
  for (size_t i = 0; i < n; ++i) ids[i] = (i * 7919) % 100003;
  return ids;
}

}  // namespace

TEST(FileJob, RawFileWithPartsIsTheReferenceFile) {
  const auto ids = some_ids(3000);  // 36 MB: several parts
  const auto [got, want] = make("raw", Encoding::raw, ids, std::vector<bool>(ids.size(), false), 4);
  EXPECT_EQ(got.size(), want.size());
  EXPECT_TRUE(got == want);
}

TEST(FileJob, RejectedSamplesMoveTheRestAndTheFileIsWrittenAnew) {
  const auto ids = some_ids(3000);
  std::vector<bool> reject(ids.size(), false);
  reject[2] = reject[1500] = reject[2999] = true;
  const auto [got, want] = make("raw_rejects", Encoding::raw, ids, reject, 3);
  EXPECT_EQ(got.size(), want.size());
  EXPECT_TRUE(got == want);
}

TEST(FileJob, OneThreadAndFewSamples) {
  const auto ids = some_ids(3);
  const auto [got, want] = make("raw_small", Encoding::raw, ids, {false, false, false}, 1);
  EXPECT_TRUE(got == want);
}

TEST(FileJob, EverySampleRejected) {
  const auto ids = some_ids(4);
  const auto [got, want] = make("raw_none", Encoding::raw, ids, {true, true, true, true}, 2);
  EXPECT_TRUE(got == want);
}

TEST(FileJob, JpegFile) {
  const auto ids = some_ids(500);
  std::vector<bool> reject(ids.size(), false);
  reject[10] = true;
  const auto [got, want] = make("jpeg", Encoding::jpeg, ids, reject, 4);
  EXPECT_TRUE(got == want);
}
