// The input index: every image member of every input (which input, where its bytes lie, size,
// label, name), built by one scan that decodes nothing. Sample ids are positions in this index.
// It is saved in the output folder as index.tsv and is what rank 0 broadcasts to the others.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "datagen/archive_walk.h"
#include "datagen/index_entries.h"

namespace convoy::datagen {

struct InputInfo {
  std::string path;
  InputKind kind = InputKind::tar;
  bool complete = true;
  std::string error;  // where and why reading stopped, when incomplete
};

struct Reject {
  std::string input, member, reason;
};

struct InputIndex {
  std::vector<InputInfo> inputs;
  std::vector<std::string> classes;
  IndexEntries entries;
  std::vector<Reject> rejects;  // members refused before decoding (no label, unknown class)
  uint64_t skipped = 0;         // members that are not images (README, .DS_Store, links)
};

struct ScanOptions {
  std::vector<std::string> inputs;
  std::string classes_file, labels_file;  // optional
};

// True when the bytes start like a JPEG or a PNG.
bool looks_like_image(const unsigned char* head, size_t n);

// On a scan of more than a few seconds, progress lines go to stderr (datagen/scan_progress.h).
// A folder input's tars are scanned as inputs of their own (index.inputs gains them, after it).
// Throws convoy::Error when no member can be kept, saying what was found and what to do.
InputIndex scan_inputs(const ScanOptions& opt);

// Text form (also the saved index.tsv); parse_index gets back exactly what was serialised.
std::string serialize_index(const InputIndex& index);
InputIndex parse_index(const std::string& text, const std::string& where);

}  // namespace convoy::datagen
