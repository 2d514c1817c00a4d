// `datagen bench-decode --concurrent N`: the machine's ceiling for any decoder of these JPEGs, N
// plain TurboJPEG decoders at once (one thread per core, each over its share, held in memory); or,
// with --work, what N independent copies of datagen's per-sample work give, without the rest of a run.
#pragma once
#include <cstddef>
#include <string>

namespace convoy::datagen {

// What each of the N threads does per JPEG: decode alone (the ceiling), datagen's making of a
// sample (decode of the centre square at the DCT scale, resize, checksum), or that and writing the
// sample to a file of its own in a folder (a copy into the page cache, or tmpfs's memory).
enum class CeilingWork { decode, make, make_write };

struct CeilingOptions {
  std::string input;  // a tar or folder of JPEGs
  int size = 256;     // decoded at datagen's DCT scale for this output size (0: full size)
  int channels = 3;
  size_t limit = 1000;   // JPEGs taken from the start of the input, dealt round-robin to the decoders
  int decoders = 1;      // at once, each pinned to a core of the process's CPU set (in order)
  double seconds = 3.0;  // each decodes its share over and over until this much time has passed
  CeilingWork work = CeilingWork::decode;
  std::string write_dir;  // make_write: where each thread's file goes (removed at the end)
};

// Prints one line per decoder and the sum; the last line reads "images/s in all: X". Returns 0.
int decode_ceiling(const CeilingOptions& opt);

}  // namespace convoy::datagen
