// Hostile archive members datagen must survive: HTML named .JPEG, header bombs, 12-bit and extreme-shape
// JPEGs, links, long/non-ASCII/duplicate names, a corrupt inner tar and a .tar.gz cut short.
#include <gtest/gtest.h>
#include <zlib.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "datagen/dataset_tools.h"
#include "datagen/run.h"
#include "shared/dataset_meta.h"
#include "shared/error.h"
#include "shared/mpi_context.h"
#include "test_datagen_fixtures.h"

using namespace convoy;
using namespace convoy::datagen;
using namespace fixtures;

namespace {

RunOptions options(const std::string& input, const std::string& out) {
  RunOptions o;
  o.inputs = {input};
  o.output = out;
  o.size = 16;
  o.channels = 3;
  o.per_file = 4;
  o.seed = 7;
  o.threads = 2;
  return o;
}

// Rewrites the baseline frame header (SOF0) of a JPEG: precision, height, width. The entropy-coded
// data stays that of the real image, so only the header lies.
Bytes patch_sof(Bytes jpg, int precision, int height, int width) {
  const size_t at = jpg.find(std::string("\xFF\xC0", 2));
  if (at == Bytes::npos) throw std::runtime_error("fixture JPEG has no SOF0");
  jpg[at + 4] = char(precision);
  jpg[at + 5] = char(height >> 8), jpg[at + 6] = char(height & 0xFF);
  jpg[at + 7] = char(width >> 8), jpg[at + 8] = char(width & 0xFF);
  return jpg;
}

// The reason rejects.tsv gives for a member, or "" when it is not listed.
std::string reject_reason(const std::string& rejects, const std::string& member) {
  const std::string key = "\t" + member + "\t";  // lines are: input, member, reason
  const size_t at = rejects.find(key);
  if (at == std::string::npos) return "";
  const size_t start = at + key.size();
  return rejects.substr(start, rejects.find('\n', start) - start);
}

}  // namespace

TEST(HostileCorpus, EveryMemberGetsItsOutcomeAndNoGoodSampleIsLost) {
  const std::string dir = scratch("hostile_corpus");
  const std::string long_name = "good/" + std::string(200, 'L') + ".jpg";
  const std::string non_ascii =
      "good/\xC3\xB1"
      "and\xC3\xBA-\xE7\x94\xBB\xE5\x83\x8F.jpg";  // ñandú-画像.jpg
  write_tar(dir + "/in.tar", {{"good/a.jpg", rgb_jpeg(40, 30, 1)},
                              {"good/b.jpg", rgb_jpeg(30, 40, 2)},
                              {long_name, rgb_jpeg(24, 24, 3)},
                              {non_ascii, rgb_jpeg(20, 28, 4)},
                              {"good/dup.jpg", rgb_jpeg(32, 32, 5)},
                              {"good/dup.jpg", rgb_jpeg(32, 32, 6)},
                              {"good/tiny.jpg", rgb_jpeg(1, 1, 7)},
                              {"bad/error_page.JPEG", "<!DOCTYPE html><html><body>404 Not Found</body></html>\n"},
                              {"bad/bomb.JPEG", patch_sof(rgb_jpeg(16, 16, 8), 8, 65000, 65000)},
                              {"bad/twelve_bit.JPEG", patch_sof(rgb_jpeg(16, 16, 9), 12, 16, 16)},
                              {"bad/wide.jpg", rgb_jpeg(4000, 20, 10)},
                              {"links/symbolic.jpg", "->../good/a.jpg"},
                              {"links/hard.jpg", "=>good/a.jpg"}});
  ASSERT_EQ(run_datagen(options(dir + "/in.tar", dir + "/out"), mpi()), 0);
  const DatasetMeta m = read_dataset_meta(dir + "/out");
  EXPECT_TRUE(verify_dataset(dir + "/out").empty());

  // Every good member is a sample, duplicates by name included (they are different files).
  EXPECT_EQ(m.num_samples, 7u);
  EXPECT_EQ(m.rejected, 4u);
  EXPECT_EQ(m.skipped, 2u);  // the two links carry no data of their own
  const std::string index = read_file(dir + "/out/index.tsv");
  EXPECT_NE(index.find(long_name), std::string::npos);
  EXPECT_NE(index.find(non_ascii), std::string::npos);

  const std::string rejects = read_file(dir + "/out/rejects.tsv");
  for (const char* bad : {"bad/error_page.JPEG", "bad/bomb.JPEG", "bad/twelve_bit.JPEG", "bad/wide.jpg"})
    EXPECT_NE(reject_reason(rejects, bad), "") << bad << " not in rejects.tsv:\n" << rejects;
  EXPECT_NE(reject_reason(rejects, "bad/bomb.JPEG").find("pixels"), std::string::npos) << rejects;
  for (const char* good : {"good/a.jpg", "good/tiny.jpg", "good/dup.jpg"})
    EXPECT_EQ(reject_reason(rejects, good), "") << good;
}

// The damage is confined to the corrupt inner tar: the good inner tars before and after it are kept.
TEST(HostileCorpus, CorruptInnerTarLosesNoOtherMemberAndExitsTwo) {
  const std::string dir = scratch("hostile_inner");
  write_tar(dir + "/good.tar",
            {{"g1.jpg", rgb_jpeg(20, 20, 1)}, {"g2.jpg", rgb_jpeg(22, 20, 2)}, {"g3.jpg", rgb_jpeg(20, 24, 3)}});
  write_tar(dir + "/late.tar", {{"l1.jpg", rgb_jpeg(21, 20, 4)}, {"l2.jpg", rgb_jpeg(20, 23, 5)}});
  Bytes garbage(3000, '\0');
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = char((i * 131 + 17) % 251);
  write_tar(dir + "/in.tar", {{"good.tar", read_file(dir + "/good.tar")},
                              {"broken.tar", garbage},
                              {"late.tar", read_file(dir + "/late.tar")}});
  ASSERT_EQ(run_datagen(options(dir + "/in.tar", dir + "/out"), mpi()), 2);
  const DatasetMeta m = read_dataset_meta(dir + "/out");
  EXPECT_EQ(m.num_samples, 5u);
  EXPECT_TRUE(verify_dataset(dir + "/out").empty());
}

// How many bytes of tar a cut gzip file still yields: all that zlib can inflate before the cut.
size_t inflatable_bytes(const Bytes& gz) {
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) throw std::runtime_error("inflateInit2");
  std::vector<unsigned char> out(1 << 16);
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
  z.avail_in = uInt(gz.size());
  size_t total = 0;
  int rc = Z_OK;
  while (rc == Z_OK) {
    z.next_out = out.data();
    z.avail_out = uInt(out.size());
    rc = inflate(&z, Z_NO_FLUSH);
    total += out.size() - z.avail_out;
    if (rc == Z_BUF_ERROR && z.avail_out == out.size()) break;  // nothing more before the cut
    if (rc == Z_BUF_ERROR) rc = Z_OK;
  }
  inflateEnd(&z);
  return total;
}

// A .tar.gz cut short, however small, keeps every member whose bytes (and tar padding) lie before
// the cut; the run exits 2 and the index names the file and the member where reading stopped.
TEST(HostileCorpus, SmallTarGzCutShortKeepsTheMembersBeforeTheCut) {
  const std::string dir = scratch("hostile_gz_cut");
  Members all;
  for (int i = 0; i < 8; ++i) all.push_back({"k/img_" + std::to_string(i) + ".jpg", rgb_jpeg(60 + i, 50, i)});
  write_tar(dir + "/x.tar.gz", all, "gzip");
  const Bytes full = read_file(dir + "/x.tar.gz");
  const Bytes cut = full.substr(0, full.size() * 2 / 3);
  write_file(dir + "/cut.tar.gz", cut);
  // Short ASCII names: plain ustar headers, so member i ends after i + 1 headers and padded bodies.
  const size_t have = inflatable_bytes(cut);
  size_t end = 0, whole = 0;
  for (const auto& m : all) {
    end += 512 + (m.second.size() + 511) / 512 * 512;
    if (end <= have) ++whole;
  }
  ASSERT_GT(whole, 0u);
  ASSERT_LT(whole, all.size());
  ASSERT_EQ(run_datagen(options(dir + "/cut.tar.gz", dir + "/out"), mpi()), 2);
  const DatasetMeta m = read_dataset_meta(dir + "/out");
  EXPECT_EQ(m.num_samples, whole);
  EXPECT_TRUE(verify_dataset(dir + "/out").empty());
  const std::string index = read_file(dir + "/out/index.tsv");
  // The cut lies in the data of the first lost member, or in its header, just after the last kept one.
  const bool names_it = index.find("cut.tar.gz: archive is truncated or damaged in member '" + all[whole].first +
                                   "'") != std::string::npos ||
                        index.find("cut.tar.gz: archive ends or is damaged after member '" + all[whole - 1].first +
                                   "'") != std::string::npos;
  EXPECT_TRUE(names_it) << index;
}

// Cut inside the gzip header there is nothing to keep: the run is refused naming the file, and no
// dataset is written.
TEST(HostileCorpus, TarGzCutInItsHeaderIsRefusedNamingTheFile) {
  const std::string dir = scratch("hostile_gz_head");
  write_tar(dir + "/x.tar.gz", {{"k/a.jpg", rgb_jpeg(40, 40, 1)}}, "gzip");
  write_file(dir + "/cut.tar.gz", read_file(dir + "/x.tar.gz").substr(0, 6));
  try {
    run_datagen(options(dir + "/cut.tar.gz", dir + "/out"), mpi());
    FAIL() << "a .tar.gz cut in its header was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cut.tar.gz"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(file_exists(dir + "/out/dataset.json"));
}

// Damage and names as they come from users, in one archive: each member is a sample or a line in
// rejects.tsv with its rule, decided as PIL decides for damaged images.
TEST(HostileCorpus, DamageAndNamesAsUsersMakeThem) {
  const std::string dir = scratch("hostile_names");
  const Bytes base = rgb_jpeg(64, 48, 1), prog = rgb_jpeg(64, 48, 2, TJSAMP_420, TJFLAG_PROGRESSIVE);
  Bytes bad_text_crc = png(cv::Mat(8, 8, CV_8UC3, cv::Scalar(1, 2, 3)));
  const std::string text("tEXtComment\0hi", 14);
  bad_text_crc.insert(33, std::string("\0\0\0\x0A", 4) + text + "BAD!");  // after IHDR, a CRC that does not match
  write_tar(dir + "/in.tar", {{"ok/base.jpg", base},
                              {"ok/junk_after_end.jpg", base + "trailing junk"},
                              {"ok/tab\tin name.jpg", rgb_jpeg(20, 20, 3)},
                              {"/ok/absolute.jpg", rgb_jpeg(20, 20, 4)},
                              {"cut/base_30.jpg", base.substr(0, base.size() * 3 / 10)},
                              {"cut/base_no_end.jpg", base.substr(0, base.size() - 2)},
                              {"cut/progressive_2.jpg", prog.substr(0, prog.size() / 50 + 200)},
                              {"cut/png_bad_crc.png", bad_text_crc},
                              {"caf\xE9/latin1.jpg", rgb_jpeg(20, 20, 5)},
                              {"ok/../../escape.jpg", rgb_jpeg(20, 20, 6)}});
  ASSERT_EQ(run_datagen(options(dir + "/in.tar", dir + "/out"), mpi()), 0);
  const DatasetMeta m = read_dataset_meta(dir + "/out");
  EXPECT_EQ(m.num_samples, 4u);
  EXPECT_EQ(m.classes, (std::vector<std::string>{"cut", "ok"}));  // decoding refused cut/'s members, not its name
  const std::string rejects = read_file(dir + "/out/rejects.tsv");
  for (const char* cut : {"cut/base_30.jpg", "cut/base_no_end.jpg", "cut/progressive_2.jpg"})
    EXPECT_NE(reject_reason(rejects, cut).find("cut short"), std::string::npos) << cut << "\n" << rejects;
  EXPECT_NE(reject_reason(rejects, "cut/png_bad_crc.png").find("CRC"), std::string::npos) << rejects;
  EXPECT_NE(reject_reason(rejects, "caf\xE9/latin1.jpg").find("not UTF-8"), std::string::npos) << rejects;
  EXPECT_NE(reject_reason(rejects, "ok/../../escape.jpg").find("'..'"), std::string::npos) << rejects;
}

// Every image damaged: no dataset.json of no sample, and the run says why in one line and fails.
TEST(HostileCorpus, NothingDecodableWritesNoDatasetJson) {
  const std::string dir = scratch("hostile_none_decodable");
  const Bytes j = rgb_jpeg(64, 48, 1);
  write_tar(dir + "/in.tar", {{"c/a.jpg", j.substr(0, j.size() / 2)}, {"c/b.jpg", j.substr(0, j.size() / 3)}});
  EXPECT_EQ(run_datagen(options(dir + "/in.tar", dir + "/out"), mpi()), 1);
  EXPECT_FALSE(file_exists(dir + "/out/dataset.json"));
  EXPECT_NE(reject_reason(read_file(dir + "/out/rejects.tsv"), "c/a.jpg").find("cut short"), std::string::npos);
}
