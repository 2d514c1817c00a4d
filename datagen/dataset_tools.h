// Subcommands that work on a finished dataset folder: verify (every checksum, counts, label range),
// inspect (a summary), preview (a PNG contact sheet with class names), classes (the class file).
#pragma once
#include <string>
#include <vector>

namespace convoy::datagen {

// Every problem found, one line each naming the file; empty when the dataset is sound.
std::vector<std::string> verify_dataset(const std::string& dir);
// A human-readable summary.
std::string inspect_dataset(const std::string& dir);
// Writes a grid of `count` samples (spread over the dataset, tiles of at least 64 px) with their
// class names; returns how many samples it shows.
size_t preview_dataset(const std::string& dir, const std::string& out_png, size_t count);
// Writes the dataset's class names, one per line (for --classes of another split).
void write_dataset_classes(const std::string& dir, const std::string& out);

}  // namespace convoy::datagen
