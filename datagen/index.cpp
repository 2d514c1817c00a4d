// Scanning inputs into the index. Members count as images by their extension or, without one, by
// their first bytes; decoding later goes by content alone. The text form is in index_text.cpp.
#include "datagen/index.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "datagen/labels.h"
#include "datagen/scan_progress.h"
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

bool is_image(const Member& m) {
  if (has_image_extension(m.path)) return true;
  unsigned char head[8] = {0};
  size_t got = 0;
  while (got < sizeof head) {
    const size_t n = m.read(head + got, sizeof head - got);
    if (n == 0) break;
    got += n;
  }
  return looks_like_image(head, got);
}

// Label names, each kept once: a member holds the small number of its name, not a string.
struct LabelNames {
  std::map<std::string, uint32_t> ids;
  std::vector<std::string> names;

  uint32_t id(const std::string& name) {
    const auto [it, fresh] = ids.emplace(name, uint32_t(names.size()));
    if (fresh) names.push_back(name);
    return it->second;
  }
};

// The scan's state: the index being built and each entry's label name, resolved once all are known.
struct Scan {
  const ScanOptions& opt;
  std::map<std::string, std::string> label_file;
  InputIndex index;
  LabelNames names;
  std::vector<uint32_t> name_of;  // per entry
};

void scan_input(Scan& s, uint32_t i, ScanProgress& progress) {
  const std::string& input = s.opt.inputs[i];
  const size_t first_entry = s.index.entries.size();
  progress.input(i);
  WalkResult res = walk_input(input, [&](const Member& m) {
    progress.member(s.index.entries.size(), m.inner_tar, m.input_pos);
    if (!m.regular || !is_image(m)) {
      ++s.index.skipped;
      return true;
    }
    const std::string label = label_of(m.path, m.inner_tar, s.label_file);
    if (label.empty()) {
      s.index.rejects.push_back({input, m.path,
                                 s.label_file.empty() ? "no label: not in a folder or an inner tar"
                                                      : "no label: not in " + s.opt.labels_file});
      return true;
    }
    s.index.entries.push_back({i, m.offset, m.size, 0, m.path});
    s.name_of.push_back(s.names.id(label));
    return true;
  });
  if (!res.cut_member.empty() && s.index.entries.size() > first_entry &&
      s.index.entries.back().path == res.cut_member) {
    s.index.entries.pop_back();
    s.name_of.pop_back();
  }
  s.index.inputs.push_back({input, res.kind, res.complete, res.error});
  if (!res.complete) log_warn("%s", res.error.c_str());
}

// The label of each name: its class number, or -1 when the --classes list lacks it.
std::vector<int64_t> name_labels(const Scan& s, const std::vector<std::string>& fixed) {
  std::map<std::string, int32_t> number;
  for (size_t c = 0; c < s.index.classes.size(); ++c) number[s.index.classes[c]] = int32_t(c);
  std::vector<int64_t> labels;
  for (const std::string& name : s.names.names) {
    auto it = number.find(name);
    int64_t label = -1;
    if (it != number.end()) {
      label = it->second;
    } else if (!fixed.empty() && !s.label_file.empty() && name.find_first_not_of("0123456789") == std::string::npos &&
               name.size() < 10 && std::stoll(name) < int64_t(fixed.size())) {
      label = std::stoll(name);  // a label file may give class numbers of the --classes list
    }
    labels.push_back(label);
  }
  return labels;
}

// Every input's bytes, for the progress lines; 0 for a folder (or what cannot be read: the walk
// says why).
std::vector<uint64_t> input_sizes(const std::vector<std::string>& inputs) {
  std::vector<uint64_t> sizes;
  for (const auto& in : inputs) {
    struct stat st {};
    sizes.push_back(::stat(in.c_str(), &st) == 0 && S_ISREG(st.st_mode) ? uint64_t(st.st_size) : 0);
  }
  return sizes;
}

}  // namespace

bool looks_like_image(const unsigned char* h, size_t n) {
  static const unsigned char png[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  if (n >= 3 && h[0] == 0xFF && h[1] == 0xD8 && h[2] == 0xFF) return true;
  return n >= 8 && std::memcmp(h, png, 8) == 0;
}

InputIndex scan_inputs(const ScanOptions& opt) {
  Scan s{opt, {}, {}, {}, {}};
  if (!opt.labels_file.empty()) s.label_file = read_label_file(opt.labels_file);
  std::vector<std::string> fixed;
  if (!opt.classes_file.empty()) fixed = read_class_file(opt.classes_file);

  ScanProgress progress(input_sizes(opt.inputs));
  for (uint32_t i = 0; i < opt.inputs.size(); ++i) scan_input(s, i, progress);
  progress.finish();

  s.index.classes = fixed.empty() ? classes_from_names(s.names.names) : fixed;
  const std::vector<int64_t> labels = name_labels(s, fixed);
  s.index.entries.retain([&](size_t e) {
    const int64_t label = labels[s.name_of[e]];
    if (label < 0) {
      const IndexEntry entry = s.index.entries[e];
      s.index.rejects.push_back({s.index.inputs[entry.input].path, std::string(entry.path),
                                 "class '" + s.names.names[s.name_of[e]] + "' is not in " + opt.classes_file});
      return false;
    }
    s.index.entries.set_label(e, int32_t(label));
    return true;
  });
  return std::move(s.index);
}

}  // namespace convoy::datagen
