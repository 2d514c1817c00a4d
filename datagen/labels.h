// Where a sample's label comes from: a --labels file ("name label" per line), the inner tar's
// name (ILSVRC train layout) or the first folder component; and the class list (--classes).
#pragma once
#include <map>
#include <string>
#include <vector>

namespace convoy::datagen {

// One class name per line, in label order; blank lines ignored; duplicates refused.
std::vector<std::string> read_class_file(const std::string& path);
void write_class_file(const std::string& path, const std::vector<std::string>& classes);

// "name label" per line (the label is the last field, so names may hold spaces); '#' starts a
// comment line. Keys are member names as given (full path or base name).
std::map<std::string, std::string> read_label_file(const std::string& path);

// The label name of a member, or "" when none can be found. Label-file entries win (full path
// first, then base name), then the inner tar's name without ".tar", then the first folder.
std::string label_of(const std::string& member_path, const std::string& inner_tar,
                     const std::map<std::string, std::string>& label_file);

// Class list made from the label names seen: sorted, numerically when all are integers.
std::vector<std::string> classes_from_names(std::vector<std::string> names);

}  // namespace convoy::datagen
