// The index scan's progress on rank 0: nothing for a scan shorter than a few seconds, then images
// indexed, inner tars reached and input read with its rate (a line redrawn on a terminal, a plain
// line every 5 s otherwise, as the decoding progress of datagen/progress.h does).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "shared/timer.h"

namespace convoy::datagen {

class ScanProgress {
 public:
  struct Pace {
    double first_s;  // silent before this
    double every_s;  // then at most one line per this
  };
  // input_sizes: each input file's bytes, 0 where unknown (a folder). Paced by whether out is a terminal.
  explicit ScanProgress(std::vector<uint64_t> input_sizes, std::FILE* out = stderr);
  ScanProgress(std::vector<uint64_t> input_sizes, std::FILE* out, bool tty, Pace pace);

  // The scan goes on to input i (in order).
  void input(size_t i);
  // After each member: the images indexed so far, the member's inner tar ("" if none) and how far
  // into its input file the walk has read (0: unknown).
  void member(uint64_t images, const std::string& inner_tar, uint64_t input_pos);
  // Ends a terminal's line, when one was drawn.
  void finish();

 private:
  void print();

  std::vector<uint64_t> sizes_;
  std::FILE* out_;
  bool tty_;
  Pace pace_;
  uint64_t total_ = 0;         // bytes of all inputs; 0 when one is unknown
  uint64_t before_ = 0;        // bytes of the inputs already scanned
  size_t current_ = SIZE_MAX;  // the input being scanned
  uint64_t pos_ = 0;           // how far into it
  uint64_t images_ = 0, inner_tars_ = 0;
  std::string inner_;  // the inner tar of the last member
  Stopwatch clock_;
  double next_ = 0;  // when the next line is due
  bool drawn_ = false;
};

}  // namespace convoy::datagen
