// The streaming loader: deterministic from the seed (same batches twice, from any start batch),
// each sample at most once per epoch, all of them in evaluation,
// JPEG batch files decoded to the raw pixels, damaged files refused with their name (at the batch
// that needs them; every flip and cut), crops and flips equal to their per-pixel definition, raw
// batches equal to the float ones before normalisation, and the next epoch's first files read
// ahead and taken over.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <utility>

#include "input/augment.h"
#include "input/epoch_plan.h"
#include "input/loaded_file.h"
#include "input/loader.h"
#include "shared/atomic_file.h"
#include "shared/counter_rng.h"
#include "shared/dataset_meta.h"
#include "shared/error.h"
#include "train/synthetic_data.h"

using namespace convoy;

namespace {

const std::string kTmp = std::string(CONVOY_TEST_TMP) + "/loader";

std::string make(const std::string& name, Encoding enc, std::vector<uint32_t> counts = {16, 16, 16, 16, 16, 9}) {
  SyntheticSpec spec;
  spec.file_counts = counts;
  spec.shape = {12, 12, 3};
  spec.classes = 5;
  spec.encoding = enc;
  spec.seed = 3;
  const std::string dir = kTmp + "/" + name;
  write_synthetic_dataset(dir, spec);
  return dir;
}

LoaderOptions options(const std::string& dir, bool train) {
  AugmentSpec a;
  a.pad = 2;
  a.crop = 10;
  a.flip = true;
  return loader_options(dir, 8, train, SampleOutput::floats, a, DataShare{0, 1, 11, 2}, 3, 2);
}

std::vector<HostBatch> epoch(Loader& l, int e, long long first = 0) {
  l.start_epoch(e, first);
  std::vector<HostBatch> out;
  HostBatch b;
  while (l.next(b)) out.push_back(b);
  return out;
}

void put_byte(const std::string& path, size_t at, char c) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(std::streamoff(at));
  f.put(c);
}

// The first batch (from the start) that uses `file` in epoch 0 of `o`.
long long first_batch_of(const DatasetMeta& meta, const LoaderOptions& o, uint32_t file) {
  const std::vector<SampleRef> order = rank_stream(meta,
                                                   PlanOptions{o.share.seed, 0, 0, 1, o.train, o.share.window_files});
  size_t first_use = 0;
  while (order[first_use].file != file) ++first_use;
  return (long long)first_use / o.local_batch;
}

}  // namespace

TEST(Loader, DeterministicFromSeedAndResumableMidEpoch) {
  const std::string dir = make("raw", Encoding::raw);
  const DatasetMeta meta = read_dataset_meta(dir);
  Loader a(options(dir, true), meta), b(options(dir, true), meta);
  const auto e1 = epoch(a, 1), again = epoch(b, 1);
  ASSERT_EQ(e1.size(), size_t(89 / 8));
  for (size_t k = 0; k < e1.size(); ++k) {
    EXPECT_EQ(e1[k].labels, again[k].labels);
    EXPECT_EQ(e1[k].keys, again[k].keys);
    EXPECT_EQ(e1[k].x, again[k].x);
  }
  const auto tail = epoch(b, 1, 4);
  ASSERT_EQ(tail.size(), e1.size() - 4);
  for (size_t k = 0; k < tail.size(); ++k) EXPECT_EQ(tail[k].x, e1[k + 4].x);
  // Any number of readers and any prefetch depth give the same batches; with 8 or more, the
  // readers are woken only when a quarter of the window is free.
  for (auto [readers, prefetch] : {std::pair{1, 1}, {5, 6}, {2, 9}, {3, 0}}) {
    LoaderOptions o = options(dir, true);
    o.readers = readers;
    o.prefetch = prefetch;
    Loader c(o, meta);
    // 0: about 64 MiB of batches, at most 64 of them (these hold a few KiB).
    EXPECT_EQ(c.prefetch(), prefetch == 0 ? 64 : prefetch);
    const auto same = epoch(c, 1);
    ASSERT_EQ(same.size(), e1.size());
    for (size_t k = 0; k < e1.size(); ++k) {
      EXPECT_EQ(same[k].keys, e1[k].keys) << readers << " readers, batch " << k;
      EXPECT_EQ(same[k].x, e1[k].x) << readers << " readers, batch " << k;
    }
  }
  // Another epoch is another order.
  const auto e2 = epoch(a, 2);
  EXPECT_NE(e1[0].keys, e2[0].keys);
  // No sample twice in an epoch.
  std::set<uint64_t> seen;
  for (const auto& batch : e1)
    for (uint64_t k : batch.keys) EXPECT_TRUE(seen.insert(k).second) << "sample " << k << " twice";
  EXPECT_EQ(seen.size(), e1.size() * 8);
}

// Once an epoch's files are read, the readers read the next epoch's first shuffle window, which
// the next start_epoch takes over: the same batches as a loader that reads everything afresh.
TEST(Loader, ReadsAheadIntoTheNextEpoch) {
  const std::string dir = make("raw", Encoding::raw);
  const DatasetMeta meta = read_dataset_meta(dir);
  // Rank 1 of 2 starts and ends its share inside files (40 of the 89 samples).
  for (auto [raw, rank] : {std::pair{false, 0}, {true, 0}, {false, 1}}) {
    LoaderOptions o = options(dir, true);
    o.output = raw ? SampleOutput::raw : SampleOutput::floats;
    o.share.rank = rank, o.share.ranks = rank + 1;
    Loader a(o, meta), fresh(o, meta);
    epoch(a, 1);
    // The readers go on after the last batch; wait for them (a trainer evaluates meanwhile).
    for (int i = 0; i < 500 && a.files_read_ahead() < o.share.window_files; ++i) usleep(10000);
    EXPECT_EQ(a.files_read_ahead(), o.share.window_files);
    const auto next = epoch(a, 2), want = epoch(fresh, 2);
    EXPECT_EQ(a.files_taken_over(), o.share.window_files);
    EXPECT_EQ(fresh.files_taken_over(), 0);
    ASSERT_EQ(next.size(), want.size());
    for (size_t k = 0; k < want.size(); ++k) {
      EXPECT_EQ(next[k].keys, want[k].keys) << "batch " << k;
      EXPECT_EQ(next[k].x, want[k].x) << "batch " << k;
      EXPECT_EQ(next[k].pixels, want[k].pixels) << "batch " << k;
    }
    // Files read ahead for an epoch that does not come next are not used.
    Loader b(o, meta);
    epoch(b, 1);
    for (int i = 0; i < 500 && b.files_read_ahead() < o.share.window_files; ++i) usleep(10000);
    const auto other = epoch(b, 3);
    EXPECT_EQ(b.files_taken_over(), 0);
    EXPECT_FALSE(other.empty());
  }
  // An evaluation loader reads nothing ahead.
  Loader e(options(dir, false), meta);
  epoch(e, 1);
  usleep(50000);
  EXPECT_EQ(e.files_read_ahead(), 0);
}

TEST(Loader, RawBatchesHoldTheAugmentedSamples) {
  // The CUDA backend's batches: each sample cropped as uint8 with its flip, which mirrored and
  // normalised on the host give the float batches exactly; the pixels are the stored image under
  // the sample's crop.
  // Epochs in a row reuse the batch buffers.
  const std::string dir = make("raw", Encoding::raw);
  const DatasetMeta meta = read_dataset_meta(dir);
  LoaderOptions o = options(dir, true);
  Loader floats(o, meta);
  o.output = SampleOutput::raw;
  Loader raw(o, meta);
  std::map<int64_t, std::vector<uint8_t>> stored;
  for (const auto& f : meta.files) {
    const Batch b = read_batch_file(join_path(dir, f.name));
    for (size_t i = 0; i < b.count(); ++i) stored[b.ids[i]].assign(b.raw_image(i), b.raw_image(i) + b.shape.bytes());
  }
  const Augmenter aug(meta.shape, o.augment, o.train, meta.mean, meta.std);
  const size_t per_out = size_t(3) * 10 * 10;
  // What the CUDA backend's step is told of these samples.
  const SampleFormat& format = raw.sample_format();
  EXPECT_EQ(format.channels, 3);
  EXPECT_EQ(format.height, 10);
  EXPECT_EQ(format.width, 10);
  EXPECT_EQ(format.bytes(), per_out);
  EXPECT_EQ(format.scale, aug.scale);
  EXPECT_EQ(format.shift, aug.shift);
  const uint64_t key = augment_epoch_key(o.share.seed, 0);
  for (int e : {0, 1}) {
    const auto want = epoch(floats, e), got = epoch(raw, e);
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < got.size(); ++k) {
      const HostBatch& b = got[k];
      ASSERT_EQ(b.keys, want[k].keys);
      EXPECT_EQ(b.labels, want[k].labels);
      EXPECT_TRUE(b.x.empty());
      ASSERT_EQ(b.pixels.size(), size_t(b.n) * per_out);
      ASSERT_EQ(b.flips.size(), size_t(b.n));
      std::vector<float> x(per_out);
      std::vector<uint8_t> px(per_out);
      for (int i = 0; i < b.n; ++i) {
        const uint8_t* got_px = b.pixels.data() + size_t(i) * per_out;
        aug.normalize(got_px, b.flips[i], x.data());
        ASSERT_EQ(0, std::memcmp(x.data(), want[k].x.data() + size_t(i) * per_out, per_out * sizeof(float)));
        if (e != 0) continue;
        const SampleCrop c = aug.choose(key, int64_t(b.keys[i]));
        EXPECT_EQ(b.flips[i], c.flip);
        aug.render(PixelView{stored.at(int64_t(b.keys[i])).data(), 12 * 3, 3, PixelRect{0, 0, 12, 12}}, c, 1,
                   px.data());
        ASSERT_EQ(0, std::memcmp(px.data(), got_px, per_out)) << "batch " << k << " sample " << i;
        if (!c.flip) continue;
        aug.mirror(px.data());
        std::vector<uint8_t> mirrored(per_out);
        for (int y = 0; y < 10; ++y)
          for (int xx = 0; xx < 10; ++xx) std::memcpy(&mirrored[(y * 10 + xx) * 3], got_px + (y * 10 + 9 - xx) * 3, 3);
        ASSERT_EQ(px, mirrored);
      }
    }
  }
}

TEST(Loader, MirroredRawBatchesNeedNoFlip) {
  // For a consumer that only takes pixels (the Python loader): the loader mirrors, flips are all 0,
  // and normalising the pixels as they are gives the float batches.
  const std::string dir = make("raw", Encoding::raw);
  const DatasetMeta meta = read_dataset_meta(dir);
  LoaderOptions o = options(dir, true);
  Loader floats(o, meta);
  o.output = SampleOutput::mirrored;
  Loader mirrored(o, meta);
  const Augmenter aug(meta.shape, o.augment, o.train, meta.mean, meta.std);
  const auto want = epoch(floats, 3), got = epoch(mirrored, 3);
  ASSERT_EQ(got.size(), want.size());
  const size_t per = mirrored.sample_format().bytes();
  std::vector<float> x(per);
  for (size_t k = 0; k < got.size(); ++k)
    for (int i = 0; i < got[k].n; ++i) {
      ASSERT_EQ(got[k].flips[i], 0);
      aug.normalize(got[k].pixels.data() + i * per, false, x.data());
      ASSERT_EQ(0, std::memcmp(x.data(), want[k].x.data() + i * per, per * sizeof(float))) << k << " " << i;
    }
}

TEST(Loader, EvalYieldsEverySampleNormalised) {
  const std::string dir = make("raw", Encoding::raw);
  const DatasetMeta meta = read_dataset_meta(dir);
  LoaderOptions o = options(dir, false);
  o.augment.crop = 0;
  Loader l(o, meta);
  const auto all = epoch(l, 0);
  size_t n = 0;
  for (const auto& b : all) n += size_t(b.n);
  EXPECT_EQ(n, 89u);
  EXPECT_EQ(all.back().n, 89 % 8);
  // Evaluation keeps file order and does not augment: sample 0 is file 0's first image, normalised.
  const Batch f0 = read_batch_file(join_path(dir, meta.files[0].name));
  ASSERT_EQ(all[0].keys[0], uint64_t(f0.ids[0]));
  const uint8_t* px = f0.raw_image(0);
  for (int c = 0; c < 3; ++c)
    for (int i = 0; i < 144; ++i)
      ASSERT_NEAR(all[0].x[size_t(c) * 144 + i], (px[i * 3 + c] - meta.mean[c]) / meta.std[c], 1e-4);
}

TEST(Loader, CountsTheBatchesEveryEpochYields) {
  // What its callers plan with (train's steps per epoch, the Python module's len()): the batches
  // any epoch yields on each rank, in training the same number on every rank.
  const std::string dir = make("raw", Encoding::raw);
  const DatasetMeta meta = read_dataset_meta(dir);
  for (bool train : {true, false})
    for (int ranks : {1, 3})
      for (int r = 0; r < ranks; ++r) {
        LoaderOptions o = options(dir, train);
        o.share.rank = r, o.share.ranks = ranks;
        Loader l(o, meta);
        const auto batches = epoch(l, 1 + r);
        long long samples = 0;
        for (const HostBatch& b : batches) samples += b.n;
        EXPECT_EQ(l.batches_per_epoch(), (long long)batches.size()) << train << " " << r << "/" << ranks;
        if (train) {
          // 89 samples: 11 steps of 8 on 1 rank, 3 steps of 3 x 8 on 3 ranks.
          EXPECT_EQ(l.samples_per_epoch(), ranks == 1 ? 88 : 24);
          EXPECT_EQ(samples, l.batches_per_epoch() * 8);
        } else {
          EXPECT_EQ(l.samples_per_epoch(), samples);
        }
      }
}

TEST(Loader, JpegFilesDecodeToTheRawPixels) {
  const std::string raw = make("raw", Encoding::raw), jpeg = make("jpeg", Encoding::jpeg);
  const DatasetMeta mr = read_dataset_meta(raw), mj = read_dataset_meta(jpeg);
  const DecodedFile a = load_batch_file(raw, mr, 0);
  const DecodedFile b = load_batch_file(jpeg, mj, 0);
  ASSERT_EQ(a.pixels.size(), b.pixels.size());
  EXPECT_EQ(a.labels, b.labels);
  double err = 0;
  for (size_t i = 0; i < a.pixels.size(); ++i) err += std::fabs(double(a.pixels[i]) - b.pixels[i]);
  EXPECT_LT(err / double(a.pixels.size()), 4.0);  // quality 95 on noisy synthetic images
  LoaderOptions o = options(jpeg, true);
  Loader l(o, mj);
  EXPECT_EQ(epoch(l, 0).size(), size_t(89 / 8));
}

TEST(Loader, DamagedFileIsNamed) {
  const std::string dir = make("damaged", Encoding::raw, {16, 16});
  const DatasetMeta meta = read_dataset_meta(dir);
  const std::string victim = join_path(dir, meta.files[1].name);
  std::string bytes = read_whole_file(victim);
  bytes[bytes.size() - 5] ^= 0x01;
  write_file_atomic(victim, bytes);
  Loader l(options(dir, false), meta);
  try {
    epoch(l, 0);
    ADD_FAILURE() << "a damaged batch file was read";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(victim + ":", 0), 0u) << e.what();
  }
}

TEST(Loader, AugmentEqualsThePerPixelDefinition) {
  // Crops hanging off every edge (pad larger than the image too), flipped and not: bit for bit
  // what the per-pixel definition gives, padding normalised like a zero pixel.
  const ImageShape shape{7, 9, 3};
  std::mt19937 rng(4);
  std::vector<uint8_t> img(shape.bytes());
  for (auto& v : img) v = uint8_t(rng());
  for (int crop : {5, 9, 12}) {
    for (int pad : {0, 2, 11}) {
      if (crop > 7 + 2 * pad) continue;
      AugmentSpec spec;
      spec.crop = crop, spec.pad = pad, spec.flip = true;
      const Augmenter aug(shape, spec, true, {10.0, 0.0, 200.0}, {3.0, 1.0, 50.0});
      std::vector<float> out(size_t(3) * crop * crop);
      std::vector<uint8_t> u8(size_t(3) * crop * crop);
      const PixelView whole{img.data(), 9 * 3, 3, PixelRect{0, 0, 9, 7}};
      for (int top = 0; top <= 7 + 2 * pad - crop; ++top)
        for (int left = 0; left <= 9 + 2 * pad - crop; ++left)
          for (bool flip : {false, true}) {
            aug.render(whole, SampleCrop{top - pad, left - pad, crop, crop, flip}, 1, u8.data());
            aug.normalize(u8.data(), flip, out.data());
            for (int c = 0; c < 3; ++c)
              for (int y = 0; y < crop; ++y)
                for (int x = 0; x < crop; ++x) {
                  const int sy = top + y - pad, sx = left + (flip ? crop - 1 - x : x) - pad;
                  const bool in = sy >= 0 && sy < 7 && sx >= 0 && sx < 9;
                  const float v = in ? float(img[(size_t(sy) * 9 + sx) * 3 + c]) : 0.f;
                  const float want = v * aug.scale[c] + aug.shift[c];
                  const float got = out[(size_t(c) * crop + y) * crop + x];
                  ASSERT_EQ(std::memcmp(&want, &got, sizeof got), 0)
                      << "crop " << crop << " pad " << pad << " at " << top << "," << left << " flip " << flip << " c"
                      << c << " y" << y << " x" << x << ": " << got << " vs " << want;
                }
          }
    }
  }
}

TEST(Loader, DamagedFileFailsAtTheFirstBatchThatNeedsIt) {
  // Files are read ahead, but a damaged one stops the epoch only where it is first needed, the
  // same batch for any number of readers: the batches before it are whole.
  const std::string dir = make("damaged_late", Encoding::raw, {16, 16, 16, 16, 16, 16, 16, 16});
  const DatasetMeta meta = read_dataset_meta(dir);
  const LoaderOptions base = options(dir, true);
  const std::vector<SampleRef> order = rank_stream(
      meta, PlanOptions{base.share.seed, 0, 0, 1, true, base.share.window_files});
  const uint32_t victim_file = order.back().file;  // needed late: the loader has read it well before
  size_t first_use = 0;
  while (order[first_use].file != victim_file) ++first_use;
  const long long fails_at = (long long)first_use / base.local_batch;
  ASSERT_GT(fails_at, 2);
  const std::string victim = join_path(dir, meta.files[victim_file].name);
  std::string bytes = read_whole_file(victim);
  bytes[bytes.size() / 2] ^= 0x10;
  write_file_atomic(victim, bytes);
  for (int readers : {1, 4}) {
    LoaderOptions o = base;
    o.readers = readers;
    o.prefetch = 2;
    Loader l(o, meta);
    l.start_epoch(0);
    HostBatch b;
    for (long long k = 0; k < fails_at; ++k) ASSERT_TRUE(l.next(b)) << "batch " << k;
    try {
      l.next(b);
      ADD_FAILURE() << "batch " << fails_at << " came from a damaged file (" << readers << " readers)";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), victim + ": checksum mismatch in the images section (file is corrupt)");
    }
  }
}

TEST(Loader, EveryFlipAndTruncationIsRefusedWithTheFileName) {
  // The loader's reader checksums a file chunk by chunk as it reads it: every flipped byte and
  // every cut of a small file, raw and JPEG, fails with one line naming the file.
  for (Encoding enc : {Encoding::raw, Encoding::jpeg}) {
    SyntheticSpec spec;
    spec.file_counts = {3};
    spec.shape = {4, 4, 3};
    spec.encoding = enc;
    const std::string dir = kTmp + "/flips_" + encoding_name(enc);
    write_synthetic_dataset(dir, spec);
    const DatasetMeta meta = read_dataset_meta(dir);
    const std::string path = join_path(dir, meta.files[0].name), victim = path + ".victim";
    const std::string good = read_whole_file(path);
    LoadedFile f;
    f.load(path, meta.files[0], meta.shape);
    ASSERT_EQ(f.count(), 3u);
    auto refused = [&] {
      try {
        f.load(victim, meta.files[0], meta.shape);
      } catch (const Error& e) {
        return std::string(e.what()).rfind(victim + ": ", 0) == 0;
      }
      return false;
    };
    // Changed in place, byte by byte, then cut shorter and shorter (rewriting the file each time
    // would make the file system flush it each time).
    write_file_atomic(victim, good);
    for (size_t i = 0; i < good.size(); ++i) {
      put_byte(victim, i, char(good[i] ^ 0x04));
      ASSERT_TRUE(refused()) << encoding_name(enc) << ": flip at byte " << i << " of " << good.size();
      put_byte(victim, i, good[i]);
    }
    for (size_t n = good.size(); n-- > 0;) {
      ASSERT_EQ(::truncate(victim.c_str(), off_t(n)), 0);
      ASSERT_TRUE(refused()) << encoding_name(enc) << ": cut at " << n << " of " << good.size();
    }
  }
}

TEST(Loader, FlipsAtChunkBoundariesAreFound) {
  // A file of several read chunks: a flip on either side of each chunk boundary is found, and the
  // intact file reads back sample for sample.
  SyntheticSpec spec;
  spec.file_counts = {3};
  spec.shape = {512, 512, 3};
  const std::string dir = kTmp + "/chunks";
  write_synthetic_dataset(dir, spec);
  const DatasetMeta meta = read_dataset_meta(dir);
  const std::string path = join_path(dir, meta.files[0].name), victim = path + ".victim";
  const std::string good = read_whole_file(path);
  const Batch want = read_batch_file(path);
  LoadedFile f;
  f.load(path, meta.files[0], meta.shape);
  ASSERT_EQ(f.count(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(f.label(i), want.labels[i]);
    EXPECT_EQ(f.id(i), want.ids[i]);
    EXPECT_EQ(std::memcmp(f.pixels(i), want.raw_image(i), meta.shape.bytes()), 0) << "sample " << i;
  }
  const size_t chunk = size_t(512) << 10;
  for (size_t edge = chunk; edge < good.size(); edge += chunk)
    for (size_t at : {edge - 1, edge, good.size() - 1}) {
      std::string bad = good;
      bad[at] ^= 0x80;
      write_file_atomic(victim, bad);
      EXPECT_THROW(f.load(victim, meta.files[0], meta.shape), Error) << "flip at " << at;
    }
}

TEST(Loader, WrongFileFailsAtTheFirstBatchThatNeedsIt) {
  // A batch file sound by itself but not the one dataset.json lists (here another dataset's file of
  // the same shape, count and size): refused with one line naming it and dataset.json, where it is
  // first needed, for any number of readers; the batches before it are whole.
  const std::vector<uint32_t> counts(8, 16);
  const std::string dir = make("wrong_late", Encoding::raw, counts);
  SyntheticSpec spec;
  spec.file_counts = counts;
  spec.shape = {12, 12, 3};
  spec.classes = 5;
  spec.seed = 4;
  const std::string other = kTmp + "/wrong_other";
  write_synthetic_dataset(other, spec);
  const DatasetMeta meta = read_dataset_meta(dir), other_meta = read_dataset_meta(other);
  for (bool train : {true, false}) {
    LoaderOptions base = options(dir, train);
    const std::vector<SampleRef> order = rank_stream(
        meta, PlanOptions{base.share.seed, 0, 0, 1, train, base.share.window_files});
    const uint32_t victim_file = order.back().file;  // needed late: the loader has read it well before
    const long long fails_at = first_batch_of(meta, base, victim_file);
    ASSERT_GT(fails_at, 2);
    const std::string victim = join_path(dir, meta.files[victim_file].name);
    const std::string good = read_whole_file(victim);
    ASSERT_EQ(other_meta.files[victim_file].bytes, meta.files[victim_file].bytes);
    write_file_atomic(victim, read_whole_file(join_path(other, other_meta.files[victim_file].name)));
    for (int readers : {1, 4}) {
      LoaderOptions o = base;
      o.readers = readers;
      Loader l(o, meta);
      l.start_epoch(0);
      HostBatch b;
      for (long long k = 0; k < fails_at; ++k) ASSERT_TRUE(l.next(b)) << "batch " << k;
      try {
        l.next(b);
        ADD_FAILURE() << "batch " << fails_at << " came from another dataset's file (" << readers << " readers)";
      } catch (const Error& e) {
        const std::string what = e.what();
        EXPECT_EQ(what.rfind(victim + ": ", 0), 0u) << what;
        EXPECT_NE(what.find("dataset.json"), std::string::npos) << what;
        EXPECT_EQ(what.find('\n'), std::string::npos) << what;
      }
    }
    write_file_atomic(victim, good);
  }
}

TEST(Loader, SwappedFilesAreRefused) {
  // Two files of one dataset swapped: each is sound and of the right size, but neither is the file
  // dataset.json lists under its name.
  const std::string dir = make("swapped", Encoding::jpeg, {16, 16, 16, 16});
  const DatasetMeta meta = read_dataset_meta(dir);
  const std::string a = join_path(dir, meta.files[1].name), b = join_path(dir, meta.files[2].name);
  ASSERT_EQ(::rename(a.c_str(), (a + ".tmp").c_str()), 0);
  ASSERT_EQ(::rename(b.c_str(), a.c_str()), 0);
  ASSERT_EQ(::rename((a + ".tmp").c_str(), b.c_str()), 0);
  for (bool train : {true, false}) {
    Loader l(options(dir, train), meta);
    try {
      epoch(l, 0);
      ADD_FAILURE() << "swapped files were read (train " << train << ")";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_TRUE(what.rfind(a + ": ", 0) == 0 || what.rfind(b + ": ", 0) == 0) << what;
      EXPECT_NE(what.find("dataset.json"), std::string::npos) << what;
    }
  }
}

TEST(Loader, RefusesOptionsThatMeanNothing) {
  // Every caller of the loader (train's flags and config, bench-loader's flags, the Python module)
  // gets the same rules: each refused with one line naming the option.
  const std::string dir = make("options", Encoding::raw, {16, 16});
  const DatasetMeta meta = read_dataset_meta(dir);
  auto refused = [&](const std::function<void(LoaderOptions&)>& change, const std::string& named) {
    LoaderOptions o = options(dir, true);
    change(o);
    try {
      Loader l(o, meta);
    } catch (const Error& e) {
      return std::string(e.what()).find(named) != std::string::npos ? "" : std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(refused([](LoaderOptions& o) { o.local_batch = 0; }, "batch 0"), "");
  EXPECT_EQ(refused([](LoaderOptions& o) { o.share.rank = 2, o.share.ranks = 2; }, "rank 2 of 2"), "");
  EXPECT_EQ(refused([](LoaderOptions& o) { o.augment.pad = -1; }, "pad"), "");
  EXPECT_EQ(refused([](LoaderOptions& o) { o.augment.pad = 2000; }, "pad"), "");
  EXPECT_EQ(
      refused([](LoaderOptions& o) { o.augment.random_resized_crop = true, o.augment.pad = 0, o.augment.crop = 0; },
              "need crop"),
      "");
  EXPECT_EQ(refused([](LoaderOptions& o) { o.augment.random_resized_crop = true; }, "takes no pad"), "");
  EXPECT_EQ(refused([](LoaderOptions& o) { o.augment.scale[1] = 1.5; }, "scale"), "");
  EXPECT_EQ(refused([](LoaderOptions& o) { o.augment.ratio[0] = 2, o.augment.ratio[1] = 1; }, "ratio"), "");
  EXPECT_EQ(refused([](LoaderOptions& o) { o.augment.eval_resize = 8; }, "eval_resize 8 must be at least crop"), "");
  EXPECT_EQ(refused([](LoaderOptions& o) { o.augment.crop = 12, o.augment.pad = 0; }, "x"), "accepted");
}

TEST(Loader, DatasetJsonListingAFileTwiceIsRefused) {
  // Each entry's checks pass against the same file, so its samples would come twice an epoch.
  const std::string dir = make("listed_twice", Encoding::raw, {16, 16});
  const std::string path = join_path(dir, kDatasetJson);
  nlohmann::json j = nlohmann::json::parse(read_whole_file(path));
  j["files"].push_back(j["files"][0]);
  j["num_samples"] = j["num_samples"].get<uint64_t>() + j["files"][0]["count"].get<uint64_t>();
  write_file_atomic(path, j.dump(2));
  try {
    read_dataset_meta(dir);
    ADD_FAILURE() << "a dataset.json that lists a file twice was read";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), path + ": lists batch file 'batch_00000.cvb' twice");
  }
}
