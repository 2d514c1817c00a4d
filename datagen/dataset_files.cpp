// Batch-file names: five digits, so that a listing sorts them in batch order up to 100 000
// files; more digits where there are more.
#include "datagen/dataset_files.h"

#include <cstdio>

namespace convoy::datagen {

std::string batch_file_name(uint64_t b) {
  char name[32];
  std::snprintf(name, sizeof name, "batch_%05llu.cvb", (unsigned long long)b);
  return name;
}

}  // namespace convoy::datagen
