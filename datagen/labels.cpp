// Label sources and class lists. The class order is fixed (sorted, or the --classes file) so that
// a label means the same class in every run and in every split made with the same class file.
#include "datagen/labels.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "datagen/member_names.h"
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

// A text file's contents as lines are read from it: a UTF-8 byte-order mark (as Windows editors
// write) dropped; UTF-16 or UTF-32 text, which would match no name, refused.
std::string text_file(const std::string& path, const char* what) {
  if (!file_exists(path)) fail_file(path, std::string(what) + " not found");
  std::string text = read_whole_file(path);
  if (text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);
  if (text.rfind("\xFF\xFE", 0) == 0 || text.rfind("\xFE\xFF", 0) == 0 ||
      text.rfind(std::string("\0\0\xFE\xFF", 4), 0) == 0)
    fail_file(path, "is UTF-16 or UTF-32 text; save it as UTF-8");
  return text;
}

// A line's words must be UTF-8 text: class names go into dataset.json.
void require_utf8(const std::string& path, int n, const std::string& line) {
  if (!is_utf8(line)) fail_file(path, "line " + std::to_string(n) + ": not UTF-8 text: '" + printable(line) + "'");
}

// A member's name as the walk gives it: without "./" and "/" in front.
std::string member_key(std::string name) {
  while (name.rfind("./", 0) == 0 || name.rfind("/", 0) == 0) name.erase(0, name[0] == '/' ? 1 : 2);
  return name;
}

std::string base_name(const std::string& p) {
  const auto slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

}  // namespace

std::vector<std::string> read_class_file(const std::string& path) {
  std::istringstream in(text_file(path, "class file"));
  std::vector<std::string> classes;
  std::set<std::string> seen;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    line = trim(line);
    if (line.empty()) continue;
    require_utf8(path, n, line);
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
  std::istringstream in(text_file(path, "label file"));
  std::map<std::string, std::string> labels;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    line = trim(line);
    if (line.empty() || line[0] == '#') continue;
    const auto sep = line.find_last_of(" \t");
    if (sep == std::string::npos)
      fail_file(path, "line " + std::to_string(n) + ": expected 'name label', got '" + line + "'");
    std::string name = member_key(trim(line.substr(0, sep))), label = line.substr(sep + 1);
    require_utf8(path, n, label);
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
