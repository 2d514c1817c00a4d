// Scan progress lines. The clock is read once per member: a few ns against the microseconds a
// member's header takes, and a scan's member rate varies too much to count members between reads.
#include "datagen/scan_progress.h"

#include <unistd.h>

#include <algorithm>

namespace convoy::datagen {
namespace {

// Defaults: a terminal is redrawn like the decoding bar; a log gets a line every 5 s.
ScanProgress::Pace pace_for(bool tty) { return tty ? ScanProgress::Pace{1.0, 0.25} : ScanProgress::Pace{5.0, 5.0}; }

double mb(uint64_t bytes) { return double(bytes) / 1e6; }

}  // namespace

ScanProgress::ScanProgress(std::vector<uint64_t> input_sizes, std::FILE* out)
    : ScanProgress(std::move(input_sizes), out, ::isatty(::fileno(out)) == 1, pace_for(::isatty(::fileno(out)) == 1)) {}

ScanProgress::ScanProgress(std::vector<uint64_t> input_sizes, std::FILE* out, bool tty, Pace pace)
    : sizes_(std::move(input_sizes)), out_(out), tty_(tty), pace_(pace), next_(pace.first_s) {
  const bool known = std::all_of(sizes_.begin(), sizes_.end(), [](uint64_t s) { return s > 0; });
  for (uint64_t s : sizes_) total_ += known ? s : 0;
}

void ScanProgress::input(size_t i) {
  // An input whose size is unknown counts as far as the walk read into it.
  if (current_ < sizes_.size()) before_ += sizes_[current_] ? sizes_[current_] : pos_;
  current_ = i;
  pos_ = 0;
  inner_.clear();
}

void ScanProgress::member(uint64_t images, const std::string& inner_tar, uint64_t input_pos) {
  images_ = images;
  if (!inner_tar.empty() && inner_tar != inner_) {
    inner_ = inner_tar;
    ++inner_tars_;
  }
  pos_ = std::max(pos_, input_pos);
  if (clock_.seconds() < next_) return;
  print();
  next_ = clock_.seconds() + pace_.every_s;
}

void ScanProgress::finish() {
  if (!drawn_ || !tty_) return;
  print();
  std::fputc('\n', out_);
  std::fflush(out_);
}

void ScanProgress::print() {
  const double t = std::max(1e-9, clock_.seconds());
  const uint64_t done = before_ + pos_;
  std::string line = "datagen: indexing: " + std::to_string(images_) + " images";
  if (inner_tars_) line += ", " + std::to_string(inner_tars_) + " inner tars";
  char part[160];
  if (total_)
    std::snprintf(part, sizeof part, ", %.0f of %.0f MB (%d%%), %.0f MB/s", mb(done), mb(total_),
                  int(100.0 * double(done) / double(total_)), mb(done) / t);
  else if (done)
    std::snprintf(part, sizeof part, ", %.0f MB, %.0f MB/s", mb(done), mb(done) / t);
  else
    std::snprintf(part, sizeof part, ", %.0f images/s", double(images_) / t);
  line += part;
  line = tty_ ? "\r" + line + "  " : line + "\n";  // spaces: a redrawn line may be shorter
  std::fputs(line.c_str(), out_);
  std::fflush(out_);
  drawn_ = true;
}

}  // namespace convoy::datagen
