// Label sources and class lists. The class order is fixed (sorted, or the --classes file) so that
// a label means the same class in every run and in every split made with the same class file.
#include "datagen/labels.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "shared/atomic_file.h"
#include "shared/error.h"

namespace convoy::datagen {
namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

bool all_digits(const std::string& s) {
  return !s.empty() && s.size() < 18 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string base_name(const std::string& p) {
  const auto slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

}  // namespace

std::vector<std::string> read_class_file(const std::string& path) {
  if (!file_exists(path)) fail_file(path, "class file not found");
  std::istringstream in(read_whole_file(path));
  std::vector<std::string> classes;
  std::set<std::string> seen;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    line = trim(line);
    if (line.empty()) continue;
    if (!seen.insert(line).second)
      fail_file(path, "line " + std::to_string(n) + ": class '" + line + "' is listed twice");
    classes.push_back(line);
  }
  if (classes.empty()) fail_file(path, "holds no class names");
  return classes;
}

void write_class_file(const std::string& path, const std::vector<std::string>& classes) {
  std::string text;
  for (const auto& c : classes) text += c + "\n";
  write_file_atomic(path, text);
}

std::map<std::string, std::string> read_label_file(const std::string& path) {
  if (!file_exists(path)) fail_file(path, "label file not found");
  std::istringstream in(read_whole_file(path));
  std::map<std::string, std::string> labels;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    line = trim(line);
    if (line.empty() || line[0] == '#') continue;
    const auto sep = line.find_last_of(" \t");
    if (sep == std::string::npos)
      fail_file(path, "line " + std::to_string(n) + ": expected 'name label', got '" + line + "'");
    std::string name = trim(line.substr(0, sep)), label = line.substr(sep + 1);
    auto [it, fresh] = labels.emplace(name, label);
    if (!fresh && it->second != label)
      fail_file(path, "line " + std::to_string(n) + ": '" + name + "' has two different labels");
  }
  if (labels.empty()) fail_file(path, "holds no labels");
  return labels;
}

std::string label_of(const std::string& member_path, const std::string& inner_tar,
                     const std::map<std::string, std::string>& label_file) {
  if (!label_file.empty()) {
    // Inside an inner tar the member's own path is what a label file would name.
    std::string own = member_path;
    if (!inner_tar.empty()) {
      const auto at = member_path.rfind(inner_tar + "/");
      if (at != std::string::npos) own = member_path.substr(at + inner_tar.size() + 1);
    }
    for (const std::string& key : {member_path, own, base_name(member_path)}) {
      auto it = label_file.find(key);
      if (it != label_file.end()) return it->second;
    }
    return "";
  }
  if (!inner_tar.empty()) {
    std::string stem = base_name(inner_tar);
    return stem.substr(0, stem.size() - 4);  // ".tar"
  }
  const auto slash = member_path.find('/');
  return slash == std::string::npos ? "" : member_path.substr(0, slash);
}

std::vector<std::string> classes_from_names(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  if (std::all_of(names.begin(), names.end(), all_digits))
    std::sort(names.begin(), names.end(),
              [](const std::string& a, const std::string& b) { return std::stoll(a) < std::stoll(b); });
  return names;
}

}  // namespace convoy::datagen
