// Which names in an output folder are datagen's own: the files of a dataset folder, so that a
// folder holding anything else is the user's and left alone.
#include "datagen/dataset_files.h"

#include "shared/dataset_meta.h"

namespace convoy::datagen {

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
