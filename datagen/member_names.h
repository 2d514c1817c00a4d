// Which names datagen takes as they come and which it refuses, decided when a member is scanned,
// before any decoding: member paths may hold any bytes, class names must be text a class file and
// dataset.json can hold.
#pragma once
#include <string>

namespace convoy::datagen {

// Whether s is well-formed UTF-8 (no overlong forms, no surrogates, nothing past U+10FFFF).
bool is_utf8(const std::string& s);

// Why a member's path is refused ("" when it is not): a '..' component would climb out of the
// archive or folder. Any other bytes are kept (index.tsv and rejects.tsv escape tabs and line ends).
std::string path_problem(const std::string& path);

// Why a class name is refused ("" when it is not): not UTF-8 (dataset.json holds it as text), a
// control character such as a line end, or a space or tab at either end (a class file is one name
// a line, trimmed).
std::string class_name_problem(const std::string& name);

// s for a message: control characters and bytes that are not UTF-8 written as \xNN.
std::string printable(const std::string& s);

}  // namespace convoy::datagen
