// Names and text files as users make them: any bytes in member and folder names, tabs and line
// ends in them, absolute and '..' member paths, --classes and --labels files with a byte-order
// mark, CRLF line ends, trailing spaces, blank lines and duplicate entries; and the layouts that
// used to end in "no images found": a flat tar, a folder of links to images, a folder of per-class
// tars and several per-class tars given as inputs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "datagen/dataset_tools.h"
#include "datagen/run.h"
#include "shared/dataset_meta.h"
#include "shared/error.h"
#include "test_datagen_fixtures.h"

using namespace convoy;
using namespace convoy::datagen;
using namespace fixtures;

namespace {

RunOptions options(const std::vector<std::string>& inputs, const std::string& out) {
  RunOptions o;
  o.inputs = inputs;
  o.output = out;
  o.size = 16;
  o.per_file = 4;
  o.threads = 2;
  return o;
}

// rejects.tsv as (member, reason) pairs; every line must have exactly three fields.
std::vector<std::pair<std::string, std::string>> rejects_of(const std::string& dir) {
  std::vector<std::pair<std::string, std::string>> out;
  const std::string text = read_file(dir + "/rejects.tsv");
  size_t at = text.find('\n') + 1;  // the header
  while (at < text.size()) {
    const size_t end = text.find('\n', at);
    const std::string line = text.substr(at, end - at);
    const size_t a = line.find('\t'), b = line.find('\t', a + 1);
    EXPECT_TRUE(a != std::string::npos && b != std::string::npos && line.find('\t', b + 1) == std::string::npos)
        << "not three fields: " << line;
    out.emplace_back(line.substr(a + 1, b - a - 1), line.substr(b + 1));
    at = end + 1;
  }
  return out;
}

std::string reason_for(const std::string& dir, const std::string& member) {
  for (const auto& [m, r] : rejects_of(dir))
    if (m == member) return r;
  return "";
}

std::string error_of(const RunOptions& o) {
  try {
    run_datagen(o, mpi());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// A folder name that is not UTF-8 cannot be a class name in dataset.json: its members are refused
// when scanned, each with a line, and the rest make the dataset. A file name of any bytes is fine.
TEST(DatagenNames, NonUtf8ClassIsRefusedPerMemberAndTheRunFinishes) {
  const std::string dir = scratch("names_utf8");
  write_tar(dir + "/in.tar", {{"caf\xE9/a.jpg", rgb_jpeg(20, 20, 1)},
                              {"good/b\xFF\xFE.jpg", rgb_jpeg(20, 20, 2)},
                              {"good/c.jpg", rgb_jpeg(20, 20, 3)},
                              {"other/d.jpg", rgb_jpeg(20, 20, 4)}});
  ASSERT_EQ(run_datagen(options({dir + "/in.tar"}, dir + "/out"), mpi()), 0);
  const DatasetMeta m = read_dataset_meta(dir + "/out");
  EXPECT_EQ(m.classes, (std::vector<std::string>{"good", "other"}));
  EXPECT_EQ(m.num_samples, 3u);
  EXPECT_NE(reason_for(dir + "/out", "caf\xE9/a.jpg").find("not UTF-8"), std::string::npos);
}

// Tabs and line ends in a file's name are kept (index.tsv escapes them, and rejects.tsv names such
// a member escaped, \t \n \r \\, so that its lines stay whole); in a class name, which a --classes
// file holds one per line, they are refused. '..' climbs out of the archive and is refused; an
// absolute path is read as tar extracts it, without its leading '/'.
TEST(DatagenNames, ControlCharactersAndDotDotEachGetTheirRule) {
  const std::string dir = scratch("names_control");
  write_tar(dir + "/in.tar", {{"good/tab\there.jpg", rgb_jpeg(20, 20, 1)},
                              {"good/line\nfeed.jpg", rgb_jpeg(20, 20, 2)},
                              {"good/carriage\rreturn.jpg", rgb_jpeg(20, 20, 3)},
                              {"good/not\tan image.jpg", "<html>not an image</html>"},
                              {"two\nlines/a.jpg", rgb_jpeg(20, 20, 8)},
                              {"../good/escape.jpg", rgb_jpeg(20, 20, 4)},
                              {"good/../../up.jpg", rgb_jpeg(20, 20, 5)},
                              {"/good/absolute.jpg", rgb_jpeg(20, 20, 6)},
                              {"good/plain.jpg", rgb_jpeg(20, 20, 7)}});
  ASSERT_EQ(run_datagen(options({dir + "/in.tar"}, dir + "/out"), mpi()), 0);
  const DatasetMeta m = read_dataset_meta(dir + "/out");
  EXPECT_EQ(m.num_samples, 5u);  // the three names with control characters, plain.jpg, absolute.jpg
  EXPECT_EQ(m.classes, (std::vector<std::string>{"good"}));
  EXPECT_TRUE(verify_dataset(dir + "/out").empty());
  EXPECT_EQ(rejects_of(dir + "/out").size(), 4u);
  EXPECT_NE(reason_for(dir + "/out", "../good/escape.jpg").find("'..'"), std::string::npos);
  EXPECT_NE(reason_for(dir + "/out", "good/../../up.jpg").find("'..'"), std::string::npos);
  EXPECT_NE(reason_for(dir + "/out", "two\\nlines/a.jpg").find("line end"), std::string::npos);
  EXPECT_NE(reason_for(dir + "/out", "good/not\\tan image.jpg").find("not a JPEG or PNG"), std::string::npos);
}

// Text files as editors write them: a UTF-8 byte-order mark, CRLF, trailing spaces, blank lines,
// an entry given twice the same way, "./" before a member's name.
TEST(DatagenNames, ClassAndLabelFilesAsEditorsWriteThem) {
  const std::string dir = scratch("names_text_files");
  write_tar(dir + "/val.tar",
            {{"v1.jpg", rgb_jpeg(20, 20, 1)}, {"v2.jpg", rgb_jpeg(20, 20, 2)}, {"v3.jpg", rgb_jpeg(20, 20, 3)}});
  write_file(dir + "/classes.txt",
             "\xEF\xBB\xBF"
             "cat \r\n\r\ndog\t\r\n  \r\n");
  write_file(dir + "/labels.txt",
             "\xEF\xBB\xBF"
             "v1.jpg cat\r\n./v2.jpg dog  \r\n\r\nv3.jpg 1\r\nv1.jpg cat\r\n");
  RunOptions o = options({dir + "/val.tar"}, dir + "/out");
  o.classes_file = dir + "/classes.txt";
  o.labels_file = dir + "/labels.txt";
  ASSERT_EQ(run_datagen(o, mpi()), 0);
  const DatasetMeta m = read_dataset_meta(dir + "/out");
  EXPECT_EQ(m.classes, (std::vector<std::string>{"cat", "dog"}));
  EXPECT_EQ(m.num_samples, 3u);
  EXPECT_EQ(m.rejected, 0u);

  write_file(dir + "/utf16.txt", std::string("\xFF\xFE"
                                             "c\0a\0t\0",
                                             8));
  o.classes_file = dir + "/utf16.txt";
  o.output = dir + "/out16";
  EXPECT_NE(error_of(o).find("UTF-16"), std::string::npos) << error_of(o);
  write_file(dir + "/twice.txt", "cat\ndog\r\ncat \n");
  o.classes_file = dir + "/twice.txt";
  EXPECT_NE(error_of(o).find("line 3: class 'cat' is listed twice"), std::string::npos) << error_of(o);
  write_file(dir + "/latin1.txt", "caf\xE9\n");
  o.classes_file = dir + "/latin1.txt";
  EXPECT_NE(error_of(o).find("line 1: not UTF-8"), std::string::npos) << error_of(o);
}

// One flat archive without --labels: the message says what was found and what to do.
TEST(DatagenNames, FlatTarWithoutLabelsSaysWhatToDo) {
  const std::string dir = scratch("names_flat");
  write_tar(dir + "/train.tar", {{"a.jpg", rgb_jpeg(20, 20, 1)}, {"b.jpg", rgb_jpeg(20, 20, 2)}, {"README", "text"}});
  const std::string err = error_of(options({dir + "/train.tar"}, dir + "/out"));
  EXPECT_NE(err.find("train.tar: 2 images at the archive's root and no class folders; give --labels FILE"),
            std::string::npos)
      << err;
}

// Every member refused for another reason: the message gives the reasons, not "see above".
TEST(DatagenNames, NothingKeptSaysWhy) {
  const std::string dir = scratch("names_nothing");
  write_tar(dir + "/in.tar", {{"cat/a.jpg", rgb_jpeg(20, 20, 1)}, {"cat/b.jpg", rgb_jpeg(20, 20, 2)}});
  write_file(dir + "/classes.txt", "dog\n");
  RunOptions o = options({dir + "/in.tar"}, dir + "/out");
  o.classes_file = dir + "/classes.txt";
  const std::string err = error_of(o);
  EXPECT_NE(err.find("class 'cat' is not in"), std::string::npos) << err;
  EXPECT_EQ(err.find("see the refused members above"), std::string::npos) << err;
  write_tar(dir + "/empty.tar", {{"notes/README", "text"}, {"link.jpg", "->cat/a.jpg"}});
  const std::string none = error_of(options({dir + "/empty.tar"}, dir + "/out2"));
  EXPECT_NE(none.find("2 members that are not images"), std::string::npos) << none;
}

// A folder of class folders of symbolic links to images (as a dataset tool often makes), and a
// link to a class folder elsewhere, are read through the links, as PyTorch's ImageFolder reads
// them; a link back to a folder above it is skipped.
TEST(DatagenNames, FolderOfLinksToImages) {
  const std::string dir = scratch("names_links");
  for (int i = 0; i < 4; ++i) write_file(dir + "/store/" + std::to_string(i) + ".jpg", rgb_jpeg(20, 20, i));
  std::filesystem::create_directories(dir + "/in/cat");
  std::filesystem::create_directories(dir + "/in/dog");
  for (int i = 0; i < 4; ++i)
    std::filesystem::create_symlink(dir + "/store/" + std::to_string(i) + ".jpg",
                                    dir + "/in/" + (i < 2 ? "cat/" : "dog/") + std::to_string(i) + ".jpg");
  std::filesystem::create_symlink(dir + "/store/missing.jpg", dir + "/in/cat/broken.jpg");
  std::filesystem::create_directories(dir + "/birds");
  write_file(dir + "/birds/b.jpg", rgb_jpeg(20, 20, 9));
  std::filesystem::create_directory_symlink(dir + "/birds", dir + "/in/bird");   // a class folder elsewhere
  std::filesystem::create_directory_symlink(dir + "/in", dir + "/in/dog/loop");  // back up: skipped
  ASSERT_EQ(run_datagen(options({dir + "/in"}, dir + "/out"), mpi()), 0);
  const DatasetMeta m = read_dataset_meta(dir + "/out");
  EXPECT_EQ(m.num_samples, 5u);
  EXPECT_EQ(m.classes, (std::vector<std::string>{"bird", "cat", "dog"}));
  EXPECT_EQ(m.skipped, 2u);  // the broken link and the loop
}

// ImageNet's per-class tars, in a folder or given as several inputs: each tar is a class.
TEST(DatagenNames, PerClassTarsInAFolderOrAsInputs) {
  const std::string dir = scratch("names_class_tars");
  std::filesystem::create_directories(dir + "/tars");
  write_tar(dir + "/tars/n01.tar", {{"n01_1.JPEG", rgb_jpeg(20, 20, 1)}, {"n01_2.JPEG", rgb_jpeg(20, 20, 2)}});
  write_tar(dir + "/tars/n02.tar", {{"n02_1.JPEG", rgb_jpeg(20, 20, 3)}});
  ASSERT_EQ(run_datagen(options({dir + "/tars"}, dir + "/out_folder"), mpi()), 0);
  const DatasetMeta a = read_dataset_meta(dir + "/out_folder");
  EXPECT_EQ(a.classes, (std::vector<std::string>{"n01", "n02"}));
  EXPECT_EQ(a.num_samples, 3u);
  ASSERT_EQ(run_datagen(options({dir + "/tars/n01.tar", dir + "/tars/n02.tar"}, dir + "/out_inputs"), mpi()), 0);
  const DatasetMeta b = read_dataset_meta(dir + "/out_inputs");
  EXPECT_EQ(b.classes, (std::vector<std::string>{"n01", "n02"}));
  EXPECT_EQ(b.num_samples, 3u);
  EXPECT_TRUE(verify_dataset(dir + "/out_folder").empty());
}
