// The checks are byte-wise and cheap: they run once per member while scanning.
#include "datagen/member_names.h"

#include <cstdint>
#include <cstdio>

namespace convoy::datagen {
namespace {

// The length of the UTF-8 sequence at s[i], or 0 when none starts there.
size_t utf8_length(const std::string& s, size_t i) {
  const auto b = [&](size_t k) { return i + k < s.size() ? uint8_t(s[i + k]) : uint8_t(0); };
  const uint8_t c = b(0);
  const auto cont = [&](size_t k) { return (b(k) & 0xC0) == 0x80; };
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    const uint8_t lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;  // no overlongs, no surrogates
    return b(1) >= lo && b(1) <= hi && cont(2) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    const uint8_t lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    return b(1) >= lo && b(1) <= hi && cont(2) && cont(3) ? 4 : 0;
  }
  return 0;
}

bool is_control(char c) { return uint8_t(c) < 0x20 || c == 0x7F; }

}  // namespace

bool is_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_length(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string path_problem(const std::string& path) {
  for (size_t start = 0; start <= path.size();) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    if (path.compare(start, end - start, "..") == 0 && end - start == 2)
      return "path has a '..' component, which would climb out of its archive or folder";
    start = end + 1;
  }
  return "";
}

std::string class_name_problem(const std::string& name) {
  if (name.empty()) return "";
  const std::string quoted = "class name '" + printable(name) + "'";
  if (!is_utf8(name)) return quoted + " is not UTF-8 text, which dataset.json needs; rename its folder";
  for (char c : name)
    if (is_control(c)) return quoted + " holds a control character (a line end or tab), which a class file cannot hold";
  const char first = name.front(), last = name.back();
  if (first == ' ' || last == ' ')
    return quoted + " starts or ends with a space, which a class file (one name a line, trimmed) cannot keep";
  return "";
}

std::string printable(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_length(s, i);
    if (n == 0 || (n == 1 && is_control(s[i]))) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02X", unsigned(uint8_t(s[i])));
      out += hex;
      ++i;
      continue;
    }
    out.append(s, i, n);
    i += n;
  }
  return out;
}

}  // namespace convoy::datagen
