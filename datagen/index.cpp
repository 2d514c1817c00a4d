// Scanning inputs into the index, and the index's text form. Members count as images by their
// extension or, without one, by their first bytes; decoding later goes by content alone.
#include "datagen/index.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <sstream>

#include "datagen/labels.h"
#include "shared/error.h"
#include "shared/log.h"

namespace convoy::datagen {
namespace {

bool has_image_extension(const std::string& path) {
  const auto dot = path.rfind('.');
  if (dot == std::string::npos || path.find('/', dot) != std::string::npos) return false;
  std::string ext = path.substr(dot + 1);
  std::transform(ext.begin(), ext.end(), ext.begin(), ::tolower);
  return ext == "jpg" || ext == "jpeg" || ext == "jpe" || ext == "png";
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '\t') out += "\\t";
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else out += c;
  }
  return out;
}

std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    const char c = s[++i];
    out += c == 't' ? '\t' : c == 'n' ? '\n' : c == 'r' ? '\r' : c;
  }
  return out;
}

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> f;
  size_t start = 0;
  for (;;) {
    const auto tab = line.find('\t', start);
    f.push_back(line.substr(start, tab - start));
    if (tab == std::string::npos) return f;
    start = tab + 1;
  }
}

}  // namespace

bool looks_like_image(const unsigned char* h, size_t n) {
  static const unsigned char png[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  if (n >= 3 && h[0] == 0xFF && h[1] == 0xD8 && h[2] == 0xFF) return true;
  return n >= 8 && std::memcmp(h, png, 8) == 0;
}

InputIndex scan_inputs(const ScanOptions& opt) {
  InputIndex index;
  std::map<std::string, std::string> label_file;
  if (!opt.labels_file.empty()) label_file = read_label_file(opt.labels_file);
  std::vector<std::string> fixed;
  if (!opt.classes_file.empty()) fixed = read_class_file(opt.classes_file);

  std::vector<std::string> label_names;  // per entry, resolved to numbers once all are known
  for (uint32_t i = 0; i < opt.inputs.size(); ++i) {
    const std::string& input = opt.inputs[i];
    const size_t first_entry = index.entries.size();
    WalkResult res = walk_input(input, [&](const Member& m) {
      if (!m.regular) {
        ++index.skipped;
        return true;
      }
      if (!has_image_extension(m.path)) {
        unsigned char head[8] = {0};
        size_t got = 0;
        while (got < sizeof head) {
          const size_t n = m.read(head + got, sizeof head - got);
          if (n == 0) break;
          got += n;
        }
        if (!looks_like_image(head, got)) {
          ++index.skipped;
          return true;
        }
      }
      std::string label = label_of(m.path, m.inner_tar, label_file);
      if (label.empty()) {
        index.rejects.push_back({input, m.path,
                                 label_file.empty() ? "no label: not in a folder or an inner tar"
                                                    : "no label: not in " + opt.labels_file});
        return true;
      }
      index.entries.push_back({i, m.offset, m.size, 0, m.path});
      label_names.push_back(label);
      return true;
    });
    if (!res.cut_member.empty() && index.entries.size() > first_entry &&
        index.entries.back().path == res.cut_member) {
      index.entries.pop_back();
      label_names.pop_back();
    }
    index.inputs.push_back({input, res.kind, res.complete, res.error});
    if (!res.complete) log_warn("%s", res.error.c_str());
  }

  index.classes = fixed.empty() ? classes_from_names(label_names) : fixed;
  std::map<std::string, int32_t> number;
  for (size_t c = 0; c < index.classes.size(); ++c) number[index.classes[c]] = int32_t(c);
  std::vector<IndexEntry> kept;
  kept.reserve(index.entries.size());
  for (size_t e = 0; e < index.entries.size(); ++e) {
    auto it = number.find(label_names[e]);
    int64_t label = -1;
    if (it != number.end()) {
      label = it->second;
    } else if (!fixed.empty() && !label_file.empty() && label_names[e].find_first_not_of("0123456789") == std::string::npos &&
               label_names[e].size() < 10 && std::stoll(label_names[e]) < int64_t(fixed.size())) {
      label = std::stoll(label_names[e]);  // a label file may give class numbers of the --classes list
    }
    IndexEntry& entry = index.entries[e];
    if (label < 0) {
      index.rejects.push_back({index.inputs[entry.input].path, entry.path,
                               "class '" + label_names[e] + "' is not in " + opt.classes_file});
      continue;
    }
    entry.label = int32_t(label);
    kept.push_back(std::move(entry));
  }
  index.entries = std::move(kept);
  return index;
}

std::string serialize_index(const InputIndex& index) {
  std::ostringstream out;
  out << "convoy-index\t1\n";
  for (const auto& in : index.inputs)
    out << "input\t" << input_kind_name(in.kind) << '\t' << (in.complete ? 1 : 0) << '\t' << escape(in.path) << '\t'
        << escape(in.error) << '\n';
  for (const auto& c : index.classes) out << "class\t" << escape(c) << '\n';
  out << "skipped\t" << index.skipped << '\n';
  for (const auto& r : index.rejects)
    out << "reject\t" << escape(r.input) << '\t' << escape(r.member) << '\t' << escape(r.reason) << '\n';
  out << "entries\t" << index.entries.size() << "\n";
  for (const auto& e : index.entries)
    out << e.input << '\t' << e.offset << '\t' << e.size << '\t' << e.label << '\t' << escape(e.path) << '\n';
  return out.str();
}

InputIndex parse_index(const std::string& text, const std::string& where) {
  InputIndex index;
  std::istringstream in(text);
  std::string line;
  size_t n = 0;
  auto bad = [&](const std::string& why) { fail_file(where, "line " + std::to_string(n) + ": " + why); };
  if (!std::getline(in, line) || line != "convoy-index\t1") fail_file(where, "not a convoy index (version 1)");
  n = 1;
  bool entries = false;
  unsigned long long declared = 0;
  try {
    while (std::getline(in, line)) {
      ++n;
      auto f = split_tabs(line);
      if (entries) {
        if (f.size() != 5) bad("expected 5 fields");
        IndexEntry e{uint32_t(std::stoul(f[0])), std::stoll(f[1]), std::stoull(f[2]), int32_t(std::stol(f[3])),
                     unescape(f[4])};
        if (e.input >= index.inputs.size() || e.label < 0 || size_t(e.label) >= index.classes.size())
          bad("input or label out of range");
        index.entries.push_back(std::move(e));
      } else if (f[0] == "input" && f.size() == 5) {
        InputKind k = f[1] == "tar" ? InputKind::tar : f[1] == "stream" ? InputKind::stream : InputKind::folder;
        index.inputs.push_back({unescape(f[3]), k, f[2] == "1", unescape(f[4])});
      } else if (f[0] == "class" && f.size() == 2) {
        index.classes.push_back(unescape(f[1]));
      } else if (f[0] == "skipped" && f.size() == 2) {
        index.skipped = std::stoull(f[1]);
      } else if (f[0] == "reject" && f.size() == 4) {
        index.rejects.push_back({unescape(f[1]), unescape(f[2]), unescape(f[3])});
      } else if (f[0] == "entries" && f.size() == 2) {
        entries = true;
        declared = std::stoull(f[1]);
        // The count is untrusted: an entry line takes at least 8 bytes, so no more can follow.
        index.entries.reserve(size_t(std::min<unsigned long long>(declared, text.size() / 8)));
      } else {
        bad("unexpected line");
      }
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
