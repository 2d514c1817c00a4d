// datagen's index: the exact bytes of index.tsv for a scan (pinned here, so that a change of the
// member store or of the text writer shows), the member store through pop, resize and retain, and
// the scan's progress lines, of which a short scan prints none.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "datagen/index.h"
#include "datagen/scan_progress.h"
#include "shared/error.h"
#include "test_datagen_fixtures.h"

using namespace convoy;
using namespace convoy::datagen;
using namespace fixtures;

namespace {

// Member data that the scan takes for images by its first bytes alone (nothing is decoded).
Bytes jpeg_like(size_t n) { return "\xFF\xD8\xFF" + Bytes(n - 3, 'j'); }
Bytes png_like(size_t n) { return "\x89PNG\r\n\x1A\n" + Bytes(n - 8, 'p'); }

// What a stdio stream received.
std::string contents(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string out;
  for (int c; (c = std::fgetc(f)) != EOF;) out += char(c);
  return out;
}

}  // namespace

TEST(DatagenIndex, ScanOfATarOfTarsGivesThePinnedText) {
  const std::string dir = scratch("index_pinned");
  write_tar(dir + "/n01.tar", {{"n01_1.JPEG", jpeg_like(100)}, {"notes.txt", "hi"}, {"n01_2", jpeg_like(7)}});
  write_tar(dir + "/w.tar", {{"a\\b.png", png_like(20)}});
  write_tar(dir + "/outer.tar", {{"n01.tar", read_file(dir + "/n01.tar")},
                                 {"README", "x"},
                                 {"w.tar", read_file(dir + "/w.tar")},
                                 {"stray.jpg", jpeg_like(5)}});
  write_file(dir + "/classes.txt", "n01\nzz\n");
  const std::string outer = dir + "/outer.tar", classes = dir + "/classes.txt";
  const std::string want =
      "convoy-index\t1\n"
      "input\ttar\t1\t" +
      outer +
      "\t\n"
      "class\tn01\n"
      "class\tzz\n"
      "skipped\t2\n"
      "reject\t" +
      outer +
      "\tstray.jpg\tno label: not in a folder or an inner tar\n"
      "reject\t" +
      outer + "\tw.tar/a\\\\b.png\tclass 'w' is not in " + classes +
      "\n"
      "entries\t2\n"
      "0\t1024\t100\t0\tn01.tar/n01_1.JPEG\n"
      "0\t3072\t7\t0\tn01.tar/n01_2\n";
  const InputIndex idx = scan_inputs({{outer}, classes, ""});
  const std::string text = serialize_index(idx);
  EXPECT_EQ(text, want);
  EXPECT_EQ(serialize_index(parse_index(text, "t")), want);
}

TEST(DatagenIndex, EscapedFieldsRoundTripByteForByte) {
  InputIndex idx;
  idx.inputs = {{"in\t1.tar", InputKind::tar, true, ""},
                {"b\\.tar.gz", InputKind::stream, false, "cut\r\nshort"},
                {"dir", InputKind::folder, true, ""}};
  idx.classes = {"a b", "c\\d", "e\tf"};
  idx.entries = {{0, 1536, 99, 1, "x\ty\nz\\w.jpg"},
                 {1, -1, 5, 0, "p.png"},
                 {2, 0, 18446744073709551615u, 2, ""},
                 {0, 9223372036854775807, 0, 0, "\\"}};
  idx.rejects = {{"in\t1.tar", "m", "why\tnot"}};
  idx.skipped = 4;
  const std::string want =
      "convoy-index\t1\n"
      "input\ttar\t1\tin\\t1.tar\t\n"
      "input\tstream\t0\tb\\\\.tar.gz\tcut\\r\\nshort\n"
      "input\tfolder\t1\tdir\t\n"
      "class\ta b\nclass\tc\\\\d\nclass\te\\tf\n"
      "skipped\t4\n"
      "reject\tin\\t1.tar\tm\twhy\\tnot\n"
      "entries\t4\n"
      "0\t1536\t99\t1\tx\\ty\\nz\\\\w.jpg\n"
      "1\t-1\t5\t0\tp.png\n"
      "2\t0\t18446744073709551615\t2\t\n"
      "0\t9223372036854775807\t0\t0\t\\\\\n";
  EXPECT_EQ(serialize_index(idx), want);
  const InputIndex back = parse_index(want, "t");
  EXPECT_EQ(serialize_index(back), want);
  EXPECT_EQ(back.entries[0].path, "x\ty\nz\\w.jpg");
  EXPECT_EQ(back.entries[3].path, "\\");
  EXPECT_EQ(back.inputs[1].error, "cut\r\nshort");
  // A text without its last newline reads the same; a number with more than digits does not.
  EXPECT_EQ(serialize_index(parse_index(want.substr(0, want.size() - 1), "t")), want);
  const std::string head = want.substr(0, want.find("entries"));
  EXPECT_THROW(parse_index(head + "entries\t1\n0\t1x\t5\t0\tp\n", "bad.tsv"), Error);
  EXPECT_THROW(parse_index(head + "entries\t1\n0\t1\t5\t\tp\n", "bad.tsv"), Error);
}

TEST(DatagenIndex, MemberStoreKeepsPathsThroughPopResizeAndRetain) {
  IndexEntries e;
  for (uint32_t i = 0; i < 6; ++i)
    e.push_back({i, int64_t(i) * 512, i + 1u, int32_t(i % 2), std::string(i, char('a' + i))});
  e.pop_back();
  ASSERT_EQ(e.size(), 5u);
  EXPECT_EQ(e.back().path, "eeee");
  e.retain([](size_t i) { return i != 0 && i != 2; });
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0].path, "b");
  EXPECT_EQ(e[1].path, "ddd");
  EXPECT_EQ(e[2].path, "eeee");
  EXPECT_EQ(e[1].offset, 3 * 512);
  EXPECT_EQ(e[1].size, 4u);
  EXPECT_EQ(e[1].label, 1);
  e.set_label(1, 7);
  e.resize(4);
  EXPECT_EQ(e[1].label, 7);
  EXPECT_EQ(e[3].path, "");
  EXPECT_EQ(e[3].offset, -1);
  e.push_back({9, 1, 2, 3, "z"});
  EXPECT_EQ(e[4].path, "z");
  e.resize(1);
  EXPECT_EQ(e.back().path, "b");
  EXPECT_THROW(e.at(1), std::out_of_range);

  // 32 bytes a member and its path's bytes: ImageNet's 1.28 million members in ~85 MB.
  IndexEntries big;
  big.reserve(1000, 34000);
  for (uint32_t i = 0; i < 1000; ++i) big.push_back({0, 0, 0, 0, std::string(34, 'p')});
  EXPECT_EQ(big.memory_bytes(), 1000u * (32 + 34));
}

TEST(DatagenIndex, ScanProgressLinesOnlyAfterTheFirstInterval) {
  auto run = [](bool tty, ScanProgress::Pace pace, std::vector<uint64_t> sizes) {
    std::FILE* f = std::tmpfile();
    ScanProgress p(std::move(sizes), f, tty, pace);
    p.input(0);
    p.member(1, "n01.tar", 1000000);
    p.member(2, "n01.tar", 2000000);
    p.input(1);
    p.member(3, "n02.tar", 1000000);
    p.finish();
    const std::string out = contents(f);
    std::fclose(f);
    return out;
  };
  EXPECT_EQ(run(false, {3600, 1}, {2000000, 2000000}), "");  // a short scan says nothing
  EXPECT_EQ(run(true, {3600, 1}, {2000000, 2000000}), "");
  const std::string lines = run(false, {0, 0}, {2000000, 2000000});
  EXPECT_NE(lines.find("datagen: indexing: 1 images, 1 inner tars, 1 of 4 MB (25%), "), std::string::npos) << lines;
  EXPECT_NE(lines.find("datagen: indexing: 3 images, 2 inner tars, 3 of 4 MB (75%), "), std::string::npos) << lines;
  EXPECT_EQ(std::count(lines.begin(), lines.end(), '\n'), 3);
  EXPECT_NE(run(false, {0, 0}, {0, 2000000}).find("3 images, 2 inner tars, 3 MB, "), std::string::npos);
  // A terminal's line is redrawn in place and ended once.
  const std::string tty = run(true, {0, 3600}, {2000000, 2000000});
  EXPECT_EQ(tty.rfind("\rdatagen: indexing: 1 images", 0), 0u) << tty;
  EXPECT_NE(tty.find("\rdatagen: indexing: 3 images"), std::string::npos) << tty;
  EXPECT_EQ(std::count(tty.begin(), tty.end(), '\n'), 1);
  EXPECT_EQ(tty.back(), '\n');
}

TEST(DatagenIndex, ShortScanPrintsNothing) {
  const std::string dir = scratch("index_quiet");
  write_tar(dir + "/a.tar", {{"cat/1.jpg", jpeg_like(10)}, {"dog/2.png", png_like(10)}});
  testing::internal::CaptureStderr();
  const InputIndex idx = scan_inputs({{dir + "/a.tar"}, "", ""});
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(idx.entries.size(), 2u);
}
