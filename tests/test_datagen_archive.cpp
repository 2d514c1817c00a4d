// datagen's scan: member offsets (pax long names, inner tars) read back by pread equal the member
// bytes; gz inputs are streamed; folders, label files, class files, skipped members, truncated
// archives; the index text round trip; the plan's permutation.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include "datagen/archive_walk.h"
#include "datagen/index.h"
#include "datagen/labels.h"
#include "datagen/plan.h"
#include "datagen/sample_source.h"
#include "shared/error.h"
#include "test_datagen_fixtures.h"

using namespace convoy;
using namespace convoy::datagen;
using namespace fixtures;

namespace {

std::string pread_member(const std::string& file, int64_t offset, uint64_t size) {
  const int fd = ::open(file.c_str(), O_RDONLY);
  std::string out(size, '\0');
  pread_exact(fd, out.data(), size, uint64_t(offset), file);
  ::close(fd);
  return out;
}

std::string long_name(const std::string& dir, int length, char fill) {
  return dir + "/" + std::string(size_t(length), fill) + ".jpg";
}

}  // namespace

TEST(DatagenArchive, PaxLongNameOffsetsReadBackByPread) {
  const std::string dir = scratch("pax");
  Members members = {
      {"cat/short.jpg", rgb_jpeg(17, 9, 1)},
      {long_name("cat", 150, 'a'), rgb_jpeg(33, 20, 2)},
      {long_name("dog/" + std::string(120, 'd'), 200, 'b'), gray_jpeg(5, 5, 99)},
      {"dog/\xc3\xa9t\xc3\xa9 \xe2\x98\x83.jpg", rgb_jpeg(64, 48, 3)},  // non-ASCII names also go through pax
      {"dog/odd.png", png(cv::Mat(3, 7, CV_8UC3, cv::Scalar(1, 2, 3)))},
  };
  write_tar(dir + "/a.tar", members);
  std::vector<Member> seen;
  WalkResult r = walk_input(dir + "/a.tar", [&](const Member& m) {
    seen.push_back(m);
    return true;
  });
  EXPECT_TRUE(r.complete) << r.error;
  EXPECT_EQ(r.kind, InputKind::tar);
  ASSERT_EQ(seen.size(), members.size());
  for (size_t i = 0; i < members.size(); ++i) {
    EXPECT_EQ(seen[i].path, members[i].first);
    ASSERT_EQ(seen[i].size, members[i].second.size());
    ASSERT_GE(seen[i].offset, 0);
    EXPECT_EQ(pread_member(dir + "/a.tar", seen[i].offset, seen[i].size), members[i].second) << members[i].first;
  }
}

TEST(DatagenArchive, InnerTarsGiveLabelsAndAbsoluteOffsets) {
  const std::string dir = scratch("nested");
  Members a = {{"n01_1.JPEG", rgb_jpeg(20, 10, 1)}, {long_name("x", 130, 'q'), rgb_jpeg(8, 8, 2)}};
  Members b = {{"n02_1.JPEG", rgb_jpeg(12, 30, 3)}, {"._junk", "not an image"}};
  write_tar(dir + "/n01.tar", a);
  write_tar(dir + "/n02.tar", b);
  write_tar(dir + "/outer.tar", {{"README", "hello"},
                                 {"n01.tar", read_file(dir + "/n01.tar")},
                                 {"link.jpg", "->n01.tar"},
                                 {"./hard.jpg", "=>n01.tar"},
                                 {"n02.tar", read_file(dir + "/n02.tar")}});
  InputIndex idx = scan_inputs({{dir + "/outer.tar"}, "", ""});
  ASSERT_EQ(idx.entries.size(), 3u);
  EXPECT_EQ(idx.skipped, 4u);  // README, the two links, ._junk
  EXPECT_EQ(idx.classes, (std::vector<std::string>{"n01", "n02"}));
  EXPECT_EQ(idx.entries[0].path, "n01.tar/n01_1.JPEG");
  EXPECT_EQ(idx.entries[0].label, 0);
  EXPECT_EQ(idx.entries[2].label, 1);
  const std::vector<Bytes> want = {a[0].second, a[1].second, b[0].second};
  SampleSource src(idx, {});
  for (size_t i = 0; i < 3; ++i) {
    std::vector<uint8_t> got;
    src.read(i, got);
    EXPECT_EQ(Bytes(got.begin(), got.end()), want[i]) << idx.entries[i].path;
  }
}

TEST(DatagenArchive, GzipInputIsStreamedWithTheSameIndex) {
  const std::string dir = scratch("gz");
  Members m = {{"a/1.jpg", rgb_jpeg(10, 10, 1)},
               {"b/2.png", png(cv::Mat(4, 4, CV_8UC1, cv::Scalar(7)))},
               {"a/3.jpg", rgb_jpeg(9, 12, 3)}};
  write_tar(dir + "/p.tar", m);
  write_tar(dir + "/p.tar.gz", m, "gzip");
  InputIndex plain = scan_inputs({{dir + "/p.tar"}, "", ""});
  InputIndex gz = scan_inputs({{dir + "/p.tar.gz"}, "", ""});
  EXPECT_EQ(gz.inputs[0].kind, InputKind::stream);
  ASSERT_EQ(gz.entries.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(gz.entries[i].path, plain.entries[i].path);
    EXPECT_EQ(gz.entries[i].label, plain.entries[i].label);
    EXPECT_EQ(gz.entries[i].offset, -1);
  }
  SampleSource src(gz, {0, 2});  // this "rank" needs samples 0 and 2 only
  std::vector<uint8_t> got;
  src.read(2, got);
  EXPECT_EQ(Bytes(got.begin(), got.end()), m[2].second);
  EXPECT_THROW(src.read(1, got), Error);
}

TEST(DatagenArchive, Bzip2ZstdAndTarsOfTarsInsideGzip) {
  const std::string dir = scratch("filters");
  Members inner = {{"x1.JPEG", rgb_jpeg(10, 12, 1)}, {"x2.JPEG", rgb_jpeg(14, 12, 2)}};
  write_tar(dir + "/n07.tar", inner);
  const Members outer = {{"n07.tar", read_file(dir + "/n07.tar")},
                         {"loose/y.png", png(cv::Mat(3, 3, CV_8UC1, cv::Scalar(9)))}};
  for (const std::string filter : {"gzip", "bzip2", "zstd"}) {
    const std::string path = dir + "/o.tar." + filter;
    write_tar(path, outer, filter);
    InputIndex idx = scan_inputs({{path}, "", ""});
    EXPECT_EQ(idx.inputs[0].kind, InputKind::stream) << filter;
    ASSERT_EQ(idx.entries.size(), 3u) << filter;
    EXPECT_EQ(idx.classes, (std::vector<std::string>{"loose", "n07"})) << filter;
    EXPECT_EQ(idx.entries[1].path, "n07.tar/x2.JPEG");
    SampleSource src(idx, {1});
    std::vector<uint8_t> got;
    src.read(1, got);
    EXPECT_EQ(Bytes(got.begin(), got.end()), inner[1].second) << filter;
  }
}

TEST(DatagenArchive, FolderInputInSortedOrderSkippingNonImages) {
  const std::string dir = scratch("folder");
  write_file(dir + "/in/zebra/b.jpg", rgb_jpeg(8, 8, 1));
  write_file(dir + "/in/zebra/a.jpg", rgb_jpeg(8, 8, 2));
  write_file(dir + "/in/ant/x.png", png(cv::Mat(4, 4, CV_8UC3, cv::Scalar(1, 2, 3))));
  write_file(dir + "/in/ant/.DS_Store", "junk");
  write_file(dir + "/in/ant/noext", rgb_jpeg(4, 4, 3));  // an image by content
  InputIndex idx = scan_inputs({{dir + "/in"}, "", ""});
  ASSERT_EQ(idx.entries.size(), 4u);
  EXPECT_EQ(idx.skipped, 1u);
  EXPECT_EQ(idx.entries[0].path, "ant/noext");
  EXPECT_EQ(idx.entries[1].path, "ant/x.png");
  EXPECT_EQ(idx.entries[2].path, "zebra/a.jpg");
  EXPECT_EQ(idx.classes, (std::vector<std::string>{"ant", "zebra"}));
  SampleSource src(idx, {});
  std::vector<uint8_t> got;
  src.read(2, got);
  EXPECT_EQ(Bytes(got.begin(), got.end()), read_file(dir + "/in/zebra/a.jpg"));
}

TEST(DatagenArchive, LabelFileAndClassFileFixTheLabels) {
  const std::string dir = scratch("labelfile");
  write_tar(dir + "/val.tar", {{"v1.JPEG", rgb_jpeg(8, 8, 1)},
                               {"v2.JPEG", rgb_jpeg(8, 8, 2)},
                               {"v3.JPEG", rgb_jpeg(8, 8, 3)},
                               {"v4.JPEG", rgb_jpeg(8, 8, 4)}});
  write_file(dir + "/labels.txt", "# name label\nv1.JPEG cat\nv2.JPEG dog\nv3.JPEG 0\nv4.JPEG horse\n");
  write_file(dir + "/classes.txt", "dog\ncat\n");
  InputIndex idx = scan_inputs({{dir + "/val.tar"}, dir + "/classes.txt", dir + "/labels.txt"});
  EXPECT_EQ(idx.classes, (std::vector<std::string>{"dog", "cat"}));
  ASSERT_EQ(idx.entries.size(), 3u);
  EXPECT_EQ(idx.entries[0].label, 1);  // cat
  EXPECT_EQ(idx.entries[1].label, 0);  // dog
  EXPECT_EQ(idx.entries[2].label, 0);  // class number 0 of the class file
  ASSERT_EQ(idx.rejects.size(), 1u);
  EXPECT_EQ(idx.rejects[0].member, "v4.JPEG");
  EXPECT_NE(idx.rejects[0].reason.find("horse"), std::string::npos);

  // Without a label file a flat tar has no labels: the scan says what it found and what to do.
  try {
    scan_inputs({{dir + "/val.tar"}, "", ""});
    ADD_FAILURE() << "a flat tar without --labels was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("val.tar: 4 images at the archive's root and no class folders"),
              std::string::npos)
        << e.what();
  }
  write_file(dir + "/dup.txt", "a\nb\na\n");
  EXPECT_THROW(read_class_file(dir + "/dup.txt"), Error);
}

TEST(DatagenArchive, TruncatedTarKeepsWhatCameBeforeAndNamesTheMember) {
  const std::string dir = scratch("trunc");
  Members m;
  cv::Mat noise(120, 120, CV_8UC3);
  for (int i = 0; i < 6; ++i) {
    cv::randu(noise, 0, 256);  // noise, so that gzip cannot shrink the archive much
    std::vector<uint8_t> px(noise.data, noise.data + noise.total() * 3);
    m.push_back({"c/" + std::to_string(i) + ".jpg", jpeg(px, 120, 120)});
  }
  write_tar(dir + "/full.tar", m);
  const Bytes full = read_file(dir + "/full.tar");
  // Cut inside member 3's data.
  const InputIndex whole = scan_inputs({{dir + "/full.tar"}, "", ""});
  const int64_t cut = whole.entries[3].offset + 10;
  write_file(dir + "/cut.tar", full.substr(0, size_t(cut)));
  InputIndex idx = scan_inputs({{dir + "/cut.tar"}, "", ""});
  EXPECT_FALSE(idx.inputs[0].complete);
  EXPECT_NE(idx.inputs[0].error.find("c/3.jpg"), std::string::npos) << idx.inputs[0].error;
  EXPECT_EQ(idx.entries.size(), 3u);

  write_tar(dir + "/full.tar.gz", m, "gzip");
  const Bytes gz = read_file(dir + "/full.tar.gz");
  write_file(dir + "/cut.tar.gz", gz.substr(0, gz.size() * 2 / 3));
  InputIndex gi = scan_inputs({{dir + "/cut.tar.gz"}, "", ""});
  EXPECT_FALSE(gi.inputs[0].complete);
  EXPECT_LT(gi.entries.size(), 6u);
  EXPECT_GE(gi.entries.size(), 1u);
  EXPECT_NE(gi.inputs[0].error.find(".jpg"), std::string::npos) << gi.inputs[0].error;
  // Every kept member is whole.
  SampleSource src(gi, [&] {
    std::vector<uint64_t> all(gi.entries.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    return all;
  }());
  for (size_t i = 0; i < gi.entries.size(); ++i) {
    std::vector<uint8_t> got;
    src.read(i, got);
    EXPECT_EQ(Bytes(got.begin(), got.end()), m[i].second);
  }
}

TEST(DatagenArchive, NotATarIsAClearError) {
  const std::string dir = scratch("notatar");
  write_file(dir + "/x.tar", std::string(3000, 'z'));
  try {
    scan_inputs({{dir + "/x.tar"}, "", ""});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("x.tar"), std::string::npos) << e.what();
  }
}

TEST(DatagenArchive, IndexTextRoundTrip) {
  InputIndex idx;
  idx.inputs = {{"in\t1.tar", InputKind::tar, true, ""}, {"b.tar.gz", InputKind::stream, false, "cut\nshort"}};
  idx.classes = {"a b", "c\\d"};
  idx.entries = {{0, 1536, 99, 1, "x\ty\nz\\w.jpg"}, {1, -1, 5, 0, "p.png"}};
  idx.rejects = {{"in\t1.tar", "m", "why\tnot"}};
  idx.skipped = 4;
  const std::string text = serialize_index(idx);
  InputIndex back = parse_index(text, "t");
  EXPECT_EQ(serialize_index(back), text);
  EXPECT_EQ(back.entries[0].path, "x\ty\nz\\w.jpg");
  EXPECT_EQ(back.inputs[1].error, "cut\nshort");
  EXPECT_EQ(back.entries[1].offset, -1);
  EXPECT_THROW(parse_index("convoy-index\t1\nentries\t1\n0\t0\t0\t0\tp\n", "bad.tsv"), Error);  // no such input
}

// The entry count of an index is untrusted: a huge one takes no memory beyond what the text could
// hold, and a count that disagrees with the lines that follow is refused.
TEST(DatagenArchive, IndexEntryCountIsCheckedAndBounded) {
  const std::string head = "convoy-index\t1\ninput\ttar\t1\tx.tar\t\nclass\ta\nskipped\t0\n";
  const std::string one = "0\t0\t5\t0\tp.jpg\n";
  EXPECT_EQ(parse_index(head + "entries\t1\n" + one, "ok.tsv").entries.size(), 1u);
  for (const std::string count : {"0", "2", "1000000000", "18446744073709551615"}) {
    try {
      parse_index(head + "entries\t" + count + "\n" + one, "bad.tsv");
      FAIL() << "count " << count << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("bad.tsv"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(parse_index(head, "bad.tsv"), Error);  // no entries line at all
}

TEST(DatagenPlan, PermutationIsFixedBySeed) {
  const auto p = permutation(1000, 42);
  std::vector<uint64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (uint64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_EQ(p, permutation(1000, 42));
  EXPECT_NE(p, permutation(1000, 43));
  // A value fixed here guards against a change of generator, which would reshuffle every dataset.
  const auto small = permutation(5, 1);
  EXPECT_EQ(std::set<uint64_t>(small.begin(), small.end()).size(), 5u);
  Plan plan = make_plan(10, 4, 1);
  EXPECT_EQ(plan.num_files(), 3u);
  EXPECT_EQ(plan.file_end(2), 10u);
  EXPECT_EQ(plan.owner(5, 2), 1);
}
