// `datagen bench-decode`: single-core throughput of datagen's per-image work (decode with DCT
// scaling, resize) against TurboJPEG decoding alone at full size and libjpeg's entropy decoding
// alone (the least any whole-image decode costs), on the same images in memory.
#pragma once
#include <string>

#include "shared/resize.h"

namespace convoy::datagen {

struct BenchOptions {
  std::string input;
  int size = 256;
  int channels = 3;
  ResizePolicy resize = ResizePolicy::crop;
  size_t limit = 1000;  // images taken from the start of the input
  int repeat = 3;       // passes; the best is reported
};

// Prints a small table to stdout; returns 0.
int bench_decode(const BenchOptions& opt);

}  // namespace convoy::datagen
