// Batch-file names: five digits, so that a listing sorts them in batch order up to 100 000
// files; more digits where there are more.
#include "datagen/dataset_files.h"

#include <cstdio>

#include "shared/dataset_meta.h"

namespace convoy::datagen {

std::string batch_file_name(uint64_t b) {
  char name[32];
  std::snprintf(name, sizeof name, "batch_%05llu.cvb", (unsigned long long)b);
  return name;
}

bool is_dataset_file_name(const std::string& name) {
  for (const char* own : {kDatasetJson, kIndexFile, kRunFile, kRejectsFile, kMeanImageFile, kLockFile})
    if (name == own) return true;
  const std::string head = "batch_", tail = ".cvb";
  if (name.size() <= head.size() + tail.size() || name.compare(0, head.size(), head) != 0 ||
      name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
    return false;
  const std::string digits = name.substr(head.size(), name.size() - head.size() - tail.size());
  return digits.find_first_not_of("0123456789") == std::string::npos;
}

}  // namespace convoy::datagen
