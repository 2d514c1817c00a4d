// The index's text form (index.tsv, and what rank 0 broadcasts). Written straight into one string
// and read back through views of the text, so that neither side holds a second copy of it.
#include <algorithm>
#include <array>
#include <charconv>
#include <functional>
#include <stdexcept>
#include <string>

#include "datagen/index.h"
#include "shared/error.h"

namespace convoy::datagen {
namespace {

void put(std::string& out, std::string_view s) { out.append(s); }

template <class T>
void put_number(std::string& out, T v) {
  char buf[24];
  out.append(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}

void put_escaped(std::string& out, std::string_view s) {
  for (char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\t')
      out += "\\t";
    else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else
      out += c;
  }
}

// s unescaped: s itself when it holds no escape, else a copy in `copy`.
std::string_view unescape(std::string_view s, std::string& copy) {
  if (s.find('\\') == std::string_view::npos) return s;
  copy.clear();
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      copy += s[i];
      continue;
    }
    const char c = s[++i];
    copy += c == 't' ? '\t' : c == 'n' ? '\n' : c == 'r' ? '\r' : c;
  }
  return copy;
}

std::string unescaped(std::string_view s) {
  std::string copy;
  return std::string(unescape(s, copy));
}

// A line's tab-separated fields: the first few, and how many there are in all.
struct Fields {
  std::array<std::string_view, 5> f;
  size_t n = 0;
  std::string_view operator[](size_t i) const { return f[i]; }
};

Fields split_tabs(std::string_view line) {
  Fields out;
  size_t start = 0;
  for (;;) {
    const auto tab = line.find('\t', start);
    if (out.n < out.f.size()) out.f[out.n] = line.substr(start, tab == std::string_view::npos ? tab : tab - start);
    ++out.n;
    if (tab == std::string_view::npos) return out;
    start = tab + 1;
  }
}

// A whole field as a number; anything else is malformed (std::logic_error, as std::stoull throws).
template <class T>
T number(std::string_view s) {
  T v{};
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || r.ec != std::errc() || r.ptr != s.data() + s.size()) throw std::invalid_argument("not a number");
  return v;
}

// The text's lines in order, as std::getline gives them: a last line without '\n' counts.
struct Lines {
  const std::string& text;
  size_t pos = 0;

  bool next(std::string_view& line) {
    if (pos >= text.size()) return false;
    const size_t nl = std::min(text.find('\n', pos), text.size());
    line = std::string_view(text).substr(pos, nl - pos);
    pos = nl + 1;
    return true;
  }
};

void put_head(std::string& out, const InputIndex& index) {
  put(out, "convoy-index\t1\n");
  for (const auto& in : index.inputs) {
    put(out, "input\t");
    put(out, input_kind_name(in.kind));
    put(out, in.complete ? "\t1\t" : "\t0\t");
    put_escaped(out, in.path);
    put(out, "\t");
    put_escaped(out, in.error);
    put(out, "\n");
  }
  for (const auto& c : index.classes) {
    put(out, "class\t");
    put_escaped(out, c);
    put(out, "\n");
  }
  put(out, "skipped\t");
  put_number(out, index.skipped);
  put(out, "\n");
  for (const auto& r : index.rejects) {
    put(out, "reject\t");
    put_escaped(out, r.input);
    put(out, "\t");
    put_escaped(out, r.member);
    put(out, "\t");
    put_escaped(out, r.reason);
    put(out, "\n");
  }
  put(out, "entries\t");
  put_number(out, index.entries.size());
  put(out, "\n");
}

// A line before the entries; false for the "entries" line that ends them.
bool parse_head_line(const Fields& f, InputIndex& index, unsigned long long& declared,
                     const std::function<void(const std::string&)>& bad) {
  if (f[0] == "input" && f.n == 5) {
    InputKind k = f[1] == "tar" ? InputKind::tar : f[1] == "stream" ? InputKind::stream : InputKind::folder;
    index.inputs.push_back({unescaped(f[3]), k, f[2] == "1", unescaped(f[4])});
  } else if (f[0] == "class" && f.n == 2) {
    index.classes.push_back(unescaped(f[1]));
  } else if (f[0] == "skipped" && f.n == 2) {
    index.skipped = number<uint64_t>(f[1]);
  } else if (f[0] == "reject" && f.n == 4) {
    index.rejects.push_back({unescaped(f[1]), unescaped(f[2]), unescaped(f[3])});
  } else if (f[0] == "entries" && f.n == 2) {
    declared = number<unsigned long long>(f[1]);
    return false;
  } else {
    bad("unexpected line");
  }
  return true;
}

}  // namespace

std::string serialize_index(const InputIndex& index) {
  std::string out;
  // Room for what the numbers of an entry usually take; pages reserved and not written cost no memory.
  out.reserve(4096 + index.entries.path_bytes() + index.entries.size() * 48);
  put_head(out, index);
  for (size_t i = 0; i < index.entries.size(); ++i) {
    const IndexEntry e = index.entries[i];
    put_number(out, e.input);
    out += '\t';
    put_number(out, e.offset);
    out += '\t';
    put_number(out, e.size);
    out += '\t';
    put_number(out, e.label);
    out += '\t';
    put_escaped(out, e.path);
    out += '\n';
  }
  return out;
}

InputIndex parse_index(const std::string& text, const std::string& where) {
  InputIndex index;
  Lines lines{text};
  std::string_view line;
  size_t n = 0;
  const std::function<void(const std::string&)> bad = [&](const std::string& why) {
    fail_file(where, "line " + std::to_string(n) + ": " + why);
  };
  if (!lines.next(line) || line != "convoy-index\t1") fail_file(where, "not a convoy index (version 1)");
  n = 1;
  bool entries = false;
  unsigned long long declared = 0;
  std::string copy;
  try {
    while (lines.next(line)) {
      ++n;
      const Fields f = split_tabs(line);
      if (!entries) {
        entries = !parse_head_line(f, index, declared, bad);
        // The count is untrusted: an entry line takes at least 8 bytes, so no more can follow.
        if (entries)
          index.entries.reserve(size_t(std::min<unsigned long long>(declared, text.size() / 8)),
                                text.size() - std::min(lines.pos, text.size()));
        continue;
      }
      if (f.n != 5) bad("expected 5 fields");
      IndexEntry e{number<uint32_t>(f[0]), number<int64_t>(f[1]), number<uint64_t>(f[2]), number<int32_t>(f[3]),
                   unescape(f[4], copy)};
      if (e.input >= index.inputs.size() || e.label < 0 || size_t(e.label) >= index.classes.size())
        bad("input or label out of range");
      index.entries.push_back(e);
    }
  } catch (const std::logic_error&) {
    bad("malformed number");
  }
  if (!entries) bad("no entries line");
  if (index.entries.size() != declared)
    bad(std::to_string(declared) + " entries declared, " + std::to_string(index.entries.size()) + " found");
  return index;
}

}  // namespace convoy::datagen
