// Where a test binary finds the repository's configs/ and the tools it runs, also on another machine
// than the one that built it (test binaries packed for a GPU host, where the build's paths are absent).
#pragma once
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#ifndef CONVOY_SOURCE_DIR
#error "CONVOY_SOURCE_DIR must name the source tree (tests/CMakeLists.txt defines it)"
#endif

namespace convoy::test {

// The first of: the folder CONVOY_CONFIGS names; CONVOY_SOURCE_DIR/configs; a configs/ beside the
// binary or in one of the folders above it; the source tree's configs/ as compiled in. A configs/
// found by its place counts only when it holds fmnist.toml, so that another project's configs/
// higher up is passed over. An empty variable counts as unset.
inline std::string find_configs_dir(const char* configs_env, const char* source_env, const std::string& exe) {
  namespace fs = std::filesystem;
  if (configs_env && *configs_env) return configs_env;
  if (source_env && *source_env) return (fs::path(source_env) / "configs").string();
  std::error_code ec;
  for (fs::path dir = fs::path(exe).parent_path(); !dir.empty(); dir = dir.parent_path()) {
    if (fs::is_regular_file(dir / "configs" / "fmnist.toml", ec)) return (dir / "configs").string();
    if (dir == dir.root_path()) break;
  }
  return (fs::path(CONVOY_SOURCE_DIR) / "configs").string();
}

// A tool the tests run (train, datagen), by name: the path `env` names; else a file of that name beside
// the binary or in the folder above it (a packed bin/; <build>/tests under <build>); else `compiled`.
inline std::string find_tool(const std::string& name, const char* env, const std::string& exe,
                             const std::string& compiled) {
  namespace fs = std::filesystem;
  if (env && *env) return env;
  if (exe.empty()) return compiled;
  std::error_code ec;
  const fs::path dir = fs::path(exe).parent_path();
  for (const fs::path& d : {dir, dir.parent_path()})
    if (fs::is_regular_file(d / name, ec)) return (d / name).string();
  return compiled;
}

// This process's binary, or "" where /proc cannot tell.
inline std::string self_exe() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "" : exe.string();
}

inline std::string configs_dir() {
  static const std::string dir = find_configs_dir(std::getenv("CONVOY_CONFIGS"), std::getenv("CONVOY_SOURCE_DIR"),
                                                  self_exe());
  return dir;
}

// A config file by name, e.g. config_path("fmnist.toml").
inline std::string config_path(const std::string& name) { return configs_dir() + "/" + name; }

}  // namespace convoy::test
