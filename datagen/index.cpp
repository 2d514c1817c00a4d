// Scanning inputs into the index. Members count as images by their extension or, without one, by
// their first bytes; decoding later goes by content alone. The text form is in index_text.cpp.
#include "datagen/index.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "datagen/labels.h"
#include "datagen/member_names.h"
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

// What one scanned input (an --input, or a tar found in a folder input) held, for the closing
// message when no image could be kept, and for the rule that makes per-class tars classes.
struct InputTally {
  bool tar = false;         // an archive (its root members may take its name as their class)
  bool in_folders = false;  // it holds image members in folders or inner tars
  uint64_t at_root = 0;     // image members at its root
  uint64_t skipped = 0;     // members that are not images
  uint64_t absolute = 0;    // members whose path started with '/'
  std::string stem;         // its name without ".tar"
};

// The scan's state: the index being built and each entry's label name, resolved once all are known.
struct Scan {
  const ScanOptions& opt;
  std::map<std::string, std::string> label_file;
  InputIndex index;
  LabelNames names;
  std::vector<uint32_t> name_of;  // per entry
  // Per entry: kNotAtRoot, or the index in rejects of its refusal as a flat archive's root member,
  // which stands unless its tar turns out to be one of several per-class tars (tar_is_a_class).
  std::vector<size_t> root_reject;
  std::vector<InputTally> tally;  // per scanned input (index.inputs)
};

std::string file_stem(const std::string& path) {
  std::string base = path.substr(path.rfind('/') + 1);
  if (base.size() > 4) base.erase(base.size() - 4);
  return base;
}

bool ends_with_tar(const std::string& name) {
  if (name.size() < 5) return false;
  std::string tail = name.substr(name.size() - 4);
  std::transform(tail.begin(), tail.end(), tail.begin(), ::tolower);
  return tail == ".tar";
}

constexpr const char* kNoFolder = "no label: not in a folder or an inner tar";
constexpr size_t kNotAtRoot = ~size_t{0};

// One image member into the index, or into the rejects with its rule.
void take_member(Scan& s, uint32_t u, const Member& m) {
  InputTally& t = s.tally[u];
  const std::string& input = s.index.inputs[u].path;
  t.absolute += m.absolute;
  if (const std::string why = path_problem(m.path); !why.empty()) {
    s.index.rejects.push_back({input, m.path, why});
    return;
  }
  const bool root = m.inner_tar.empty() && m.path.find('/') == std::string::npos;
  if (root)
    ++t.at_root;
  else
    t.in_folders = true;
  std::string label = label_of(m.path, m.inner_tar, s.label_file);
  const bool by_tar = label.empty() && root && t.tar && s.label_file.empty();
  if (label.empty())
    s.index.rejects.push_back(
        {input, m.path, s.label_file.empty() ? kNoFolder : "no label: not in " + s.opt.labels_file});
  if (!by_tar && label.empty()) return;
  s.index.entries.push_back({u, m.offset, m.size, 0, m.path});
  s.name_of.push_back(s.names.id(by_tar ? t.stem : label));
  s.root_reject.push_back(by_tar ? s.index.rejects.size() - 1 : kNotAtRoot);
}

// Scans one input; a folder input's tars are scanned after it, each as an input of its own.
void scan_one(Scan& s, const std::string& input, ScanProgress& progress) {
  const uint32_t u = uint32_t(s.index.inputs.size());
  s.index.inputs.push_back({input, InputKind::tar, true, ""});
  s.tally.push_back({!is_folder(input), false, 0, 0, 0, file_stem(input)});
  const bool folder = !s.tally[u].tar;
  const size_t first_entry = s.index.entries.size();
  std::vector<std::string> tars;
  WalkResult res = walk_input(input, [&](const Member& m) {
    progress.member(s.index.entries.size(), m.inner_tar, m.input_pos);
    if (folder && m.regular && ends_with_tar(m.path)) {
      tars.push_back(m.path);
      return true;
    }
    if (!m.regular || !is_image(m)) {
      ++s.index.skipped;
      ++s.tally[u].skipped;
      return true;
    }
    take_member(s, u, m);
    return true;
  });
  if (!res.cut_member.empty() && s.index.entries.size() > first_entry &&
      s.index.entries.back().path == res.cut_member) {
    if (s.root_reject.back() != kNotAtRoot) s.index.rejects.pop_back();  // it is the last one
    s.index.entries.pop_back();
    s.name_of.pop_back();
    s.root_reject.pop_back();
  }
  s.index.inputs[u] = {input, res.kind, res.complete, res.error};
  if (!res.complete) log_warn("%s", res.error.c_str());
  if (s.tally[u].absolute > 0)
    log_warn("%s: %llu members have absolute paths: read without their leading '/', as tar extracts them",
             input.c_str(), (unsigned long long)s.tally[u].absolute);
  for (const std::string& tar : tars) scan_one(s, input + "/" + tar, progress);
}

// Root members of a tar take its name as their class when the run has several tars (ImageNet's
// per-class tars, in a folder or given as inputs) and this one has no class folders of its own.
bool tar_is_a_class(const Scan& s, uint32_t u) {
  const size_t tars = size_t(std::count_if(s.tally.begin(), s.tally.end(), [](const InputTally& t) { return t.tar; }));
  return tars >= 2 && !s.tally[u].in_folders;
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

// Per scanned input: whether it is a tar whose root members make a class (tar_is_a_class), said
// in one line, so that no class appears unannounced.
std::vector<char> tars_as_classes(const Scan& s) {
  std::vector<char> tar_class(s.tally.size());
  std::string named;
  size_t classes_by_tar = 0;
  for (uint32_t u = 0; u < s.tally.size(); ++u) {
    tar_class[u] = tar_is_a_class(s, u) && s.tally[u].at_root > 0;
    if (!tar_class[u] || classes_by_tar++ >= 3) continue;
    named += (named.empty() ? "" : ", ") + s.index.inputs[u].path + " -> " + printable(s.tally[u].stem);
  }
  if (classes_by_tar > 0)
    log_info("%zu tars without class folders are classes named after them (%s%s)", classes_by_tar, named.c_str(),
             classes_by_tar > 3 ? ", ..." : "");
  return tar_class;
}

// Each entry's class, or its refusal: a flat archive's root member, a class name no class file or
// dataset.json can hold, a class the --classes list lacks. The classes are those of the entries kept.
void resolve_labels(Scan& s, const std::vector<std::string>& fixed) {
  const std::vector<char> tar_class = tars_as_classes(s);
  std::vector<std::string> problem;
  for (const std::string& name : s.names.names) problem.push_back(class_name_problem(name));
  // A root member of a tar that is not a class keeps its refusal in rejects and leaves the entries;
  // one of a tar that is, drops its refusal.
  std::vector<char> dropped(s.index.rejects.size(), 0);
  for (size_t e = 0; e < s.index.entries.size(); ++e)
    if (s.root_reject[e] != kNotAtRoot && tar_class[s.index.entries[e].input]) dropped[s.root_reject[e]] = 1;
  size_t kept_rejects = 0;
  for (size_t r = 0; r < s.index.rejects.size(); ++r)
    if (!dropped[r] && kept_rejects++ != r) s.index.rejects[kept_rejects - 1] = std::move(s.index.rejects[r]);
  s.index.rejects.resize(kept_rejects);
  const auto flat_root = [&](size_t e) {
    return s.root_reject[e] != kNotAtRoot && !tar_class[s.index.entries[e].input];
  };
  const auto refusal = [&](size_t e) -> std::string { return flat_root(e) ? kNoFolder : problem[s.name_of[e]]; };
  if (fixed.empty()) {
    std::vector<char> used(s.names.names.size(), 0);
    for (size_t e = 0; e < s.index.entries.size(); ++e)
      if (refusal(e).empty()) used[s.name_of[e]] = 1;
    std::vector<std::string> names;
    for (size_t n = 0; n < used.size(); ++n)
      if (used[n]) names.push_back(s.names.names[n]);
    s.index.classes = classes_from_names(names);
  } else {
    s.index.classes = fixed;
  }
  const std::vector<int64_t> labels = name_labels(s, fixed);
  s.index.entries.retain([&](size_t e) {
    if (flat_root(e)) return false;  // refused already, in walk order
    std::string why = refusal(e);
    const int64_t label = labels[s.name_of[e]];
    if (why.empty() && label < 0)
      why = "class '" + printable(s.names.names[s.name_of[e]]) + "' is not in " + s.opt.classes_file;
    if (!why.empty()) {
      const IndexEntry entry = s.index.entries[e];
      s.index.rejects.push_back({s.index.inputs[entry.input].path, std::string(entry.path), why});
      return false;
    }
    s.index.entries.set_label(e, int32_t(label));
    return true;
  });
}

std::string with_commas(uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// Why no image could be kept, from what the scan found: a flat archive or folder without --labels
// named as such, the other refusals by reason (how many, and the first), the members skipped.
std::string nothing_kept(const Scan& s) {
  std::vector<std::string> parts;
  for (uint32_t u = 0; u < s.tally.size(); ++u) {
    const InputTally& t = s.tally[u];
    if (t.at_root == 0 || t.in_folders || !s.label_file.empty()) continue;
    const char* what = t.tar ? "archive" : "folder";
    parts.push_back(s.index.inputs[u].path + ": " + with_commas(t.at_root) + " images at the " + what +
                    "'s root and no class folders; give --labels FILE for a flat " + what);
  }
  std::map<std::string, std::pair<uint64_t, const Reject*>> reasons;
  for (const Reject& r : s.index.rejects) {
    if (s.label_file.empty() && r.reason == kNoFolder) continue;  // said above
    auto& [count, first] = reasons[r.reason];
    if (count++ == 0) first = &r;
  }
  for (const auto& [reason, seen] : reasons)
    parts.push_back(with_commas(seen.first) + " members refused: " + reason + " (the first: '" +
                    printable(seen.second->member) + "' in " + seen.second->input + ")");
  if (s.index.skipped > 0)
    parts.push_back(with_commas(s.index.skipped) + " members that are not images (other files, links) skipped");
  if (parts.empty()) parts.push_back("the inputs hold no members at all");
  std::string out = "no images to make a dataset of: ";
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? "; " : "") + parts[i];
  return out;
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
  Scan s{opt, {}, {}, {}, {}, {}, {}};
  if (!opt.labels_file.empty()) s.label_file = read_label_file(opt.labels_file);
  std::vector<std::string> fixed;
  if (!opt.classes_file.empty()) fixed = read_class_file(opt.classes_file);

  ScanProgress progress(input_sizes(opt.inputs));
  for (uint32_t i = 0; i < opt.inputs.size(); ++i) {
    progress.input(i);
    scan_one(s, opt.inputs[i], progress);
  }
  progress.finish();
  resolve_labels(s, fixed);
  if (s.index.entries.empty()) fail(nothing_kept(s));
  return std::move(s.index);
}

}  // namespace convoy::datagen
