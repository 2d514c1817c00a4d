// A rank's results as they travel to rank 0: every field back as it was sent (the phases through
// the phase table), a cut or padded record refused, and one process's gather sorted and summed.
#include <gtest/gtest.h>

#include "datagen/rank_result.h"
#include "shared/error.h"
#include "test_datagen_fixtures.h"

using namespace convoy;
using namespace convoy::datagen;

namespace {

RankResult sample_result() {
  RankResult r;
  r.files = {{7, {"batch_00007.cvb", 3, 12345, 0xdeadbeef}}, {2, {"batch_00002.cvb", 4, 99, 7}}};
  r.rejects = {{41, "image cannot be decoded or resized: bad\ttab"}, {3, ""}};
  double v = 0.25;
  for (const PhaseField& f : kPhaseFields) r.phases.*f.member = v, v *= 3;
  r.kept = 5;
  return r;
}

}  // namespace

TEST(RankResult, EveryFieldSurvivesTheTrip) {
  const RankResult a = sample_result();
  const RankResult b = RankResult::from_bytes(a.to_bytes());
  ASSERT_EQ(b.files.size(), a.files.size());
  for (size_t i = 0; i < a.files.size(); ++i) {
    EXPECT_EQ(b.files[i].first, a.files[i].first);
    EXPECT_EQ(b.files[i].second.name, a.files[i].second.name);
    EXPECT_EQ(b.files[i].second.count, a.files[i].second.count);
    EXPECT_EQ(b.files[i].second.bytes, a.files[i].second.bytes);
    EXPECT_EQ(b.files[i].second.crc32c, a.files[i].second.crc32c);
  }
  EXPECT_EQ(b.rejects, a.rejects);
  for (const PhaseField& f : kPhaseFields) EXPECT_EQ(b.phases.*f.member, a.phases.*f.member) << f.name;
  EXPECT_EQ(b.kept, a.kept);
}

TEST(RankResult, ACutOrPaddedRecordIsRefused) {
  const std::string bytes = sample_result().to_bytes();
  EXPECT_THROW(RankResult::from_bytes(bytes.substr(0, bytes.size() - 1)), Error);
  EXPECT_THROW(RankResult::from_bytes(bytes.substr(0, 8)), Error);
  EXPECT_THROW(RankResult::from_bytes(bytes + "x"), Error);
  EXPECT_THROW(RankResult::from_bytes(std::string(8, '\xff')), Error);
}

TEST(RankResult, GatherSortsFilesAndRejects) {
  const RankResult all = gather_results(sample_result(), fixtures::mpi());
  ASSERT_EQ(all.files.size(), 2u);
  EXPECT_EQ(all.files[0].first, 2u);
  EXPECT_EQ(all.files[1].first, 7u);
  ASSERT_EQ(all.rejects.size(), 2u);
  EXPECT_EQ(all.rejects[0].first, 3u);
  EXPECT_EQ(all.rejects[1].first, 41u);
  EXPECT_EQ(all.phases.read, sample_result().phases.read);
  EXPECT_EQ(all.kept, 5);
}

TEST(Phases, JsonHoldsTheGpuPhasesOnlyWithGpuResize) {
  Phases p;
  p.decode = 1.5, p.gpu_kernel = 2, p.cpu_images = 3;
  const nlohmann::json cpu = p.to_json(false), gpu = p.to_json(true);
  EXPECT_EQ(cpu.size(), 8u);
  EXPECT_EQ(cpu["decode"], 1.5);
  EXPECT_FALSE(cpu.contains("gpu_kernel"));
  EXPECT_EQ(gpu.size(), kPhaseCount);
  EXPECT_EQ(gpu["gpu_kernel"], 2.0);
  EXPECT_EQ(gpu["cpu_images"], 3.0);
  Phases q = p;
  q += p;
  EXPECT_EQ(q.decode, 3.0);
  EXPECT_EQ(q.cpu_images, 6.0);
}
