// tests/source_dir.h, how the GPU test binaries find configs/ and train, checked on the CPU: environment
// first, then the binary's own location (a packed copy elsewhere), then the compiled-in source path.
#include "source_dir.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;
using convoy::test::find_configs_dir;

namespace {

const std::string kCompiled = (fs::path(CONVOY_SOURCE_DIR) / "configs").string();

class SourceDir : public ::testing::Test {
 protected:
  // Under the system's temporary folder, not the build's, whose parents may hold the repository.
  const fs::path base = fs::temp_directory_path() / ("convoy_source_dir." + std::to_string(::getpid()));

  void TearDown() override { fs::remove_all(base); }

  // A folder holding bin/ and, when asked, configs/fmnist.toml: a test package copied to a GPU host.
  fs::path make_package(const std::string& name, bool with_configs) {
    const fs::path root = base / name;
    fs::create_directories(root / "bin");
    if (with_configs) {
      fs::create_directories(root / "configs");
      std::ofstream(root / "configs" / "fmnist.toml") << "[net]\n";
    }
    return root;
  }
};

}  // namespace

TEST_F(SourceDir, EnvironmentComesFirst) {
  const fs::path root = make_package("env", true);
  const std::string exe = (root / "bin" / "gpu_test_step").string();
  EXPECT_EQ(find_configs_dir("/opt/convoy/configs", "/src/convoy", exe), "/opt/convoy/configs");
  EXPECT_EQ(find_configs_dir(nullptr, "/src/convoy", exe), "/src/convoy/configs");
  EXPECT_EQ(find_configs_dir("", "", exe), (root / "configs").string());
}

TEST_F(SourceDir, FoundBesideOrAboveThePackedBinary) {
  const fs::path root = make_package("packed", true);
  EXPECT_EQ(find_configs_dir(nullptr, nullptr, (root / "bin" / "gpu_test_net").string()), (root / "configs").string());
  EXPECT_EQ(find_configs_dir(nullptr, nullptr, (root / "gpu_test_net").string()), (root / "configs").string());
}

TEST_F(SourceDir, CompiledPathWhenNothingElseHasConfigs) {
  const fs::path root = make_package("bare", false);
  // A configs/ without fmnist.toml is someone else's.
  fs::create_directories(root / "bin" / "configs");
  EXPECT_EQ(find_configs_dir(nullptr, nullptr, (root / "bin" / "gpu_test_step").string()), kCompiled);
  EXPECT_EQ(find_configs_dir(nullptr, nullptr, ""), kCompiled);
}

TEST_F(SourceDir, ThisBinaryFindsTheRepositoryConfigs) {
  EXPECT_TRUE(fs::is_regular_file(convoy::test::config_path("fmnist.toml"))) << convoy::test::configs_dir();
}

TEST_F(SourceDir, ToolsFoundByEnvironmentBesideOrAboveTheBinary) {
  using convoy::test::find_tool;
  const fs::path root = make_package("tools", false);
  const std::string exe = (root / "bin" / "gpu_test_faults").string();
  EXPECT_EQ(find_tool("train", nullptr, exe, "/build/train"), "/build/train");
  std::ofstream(root / "train") << "";  // <build>/train for <build>/tests/...
  EXPECT_EQ(find_tool("train", nullptr, (root / "tests" / "gpu_test_faults").string(), "/build/train"),
            (root / "train").string());
  std::ofstream(root / "bin" / "train") << "";  // a packed bin/ holding both
  EXPECT_EQ(find_tool("train", nullptr, exe, "/build/train"), (root / "bin" / "train").string());
  EXPECT_EQ(find_tool("train", "/opt/train", exe, "/build/train"), "/opt/train");
  EXPECT_EQ(find_tool("train", "", "", "/build/train"), "/build/train");
  fs::create_directories(root / "bin" / "datagen");  // a folder of that name is not the tool
  EXPECT_EQ(find_tool("datagen", nullptr, exe, "/build/datagen"), "/build/datagen");
}
