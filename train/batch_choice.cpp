// The batch-size rules: fastest with ties to the smaller, seed 002's HPL formula, linear lr scaling,
// and the sweep's table.
#include "train/batch_choice.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace convoy {
namespace {

constexpr double kHplTileBits = 160.0 * 160.0 * 64.0;  // NB = 160, 64-bit doubles
constexpr double kImageValueBits = 32;                 // fp32, as the seed's images

std::string memory_text(const BatchTrial& t) {
  if (t.memory_bytes <= 0) return "-";
  char text[48];
  const double mib = t.memory_bytes / double(1 << 20);
  std::snprintf(text, sizeof text, mib < 100 ? "%.2f MiB%s" : "%.0f MiB%s", mib, t.memory_estimated ? " (est.)" : "");
  return text;
}

std::string trial_line(const BatchTrial& t) {
  char text[96];
  if (!t.fits()) {
    std::snprintf(text, sizeof text, "%8d  %10s  ", t.batch, "-");
    return text + t.no_fit;
  }
  std::snprintf(text, sizeof text, "%8d  %10.1f  %s", t.batch, t.images_per_s, memory_text(t).c_str());
  return text;
}

std::string hpl_line(const HplBatch& h) {
  char text[256];
  std::snprintf(text, sizeof text,
                "seed 002's HPL-derived batch: 2^nint(log2(%.0f / %.0f)) = 2^%d -> %d (HPL tile 160*160*64 bits, "
                "the image as fp32 values: %.0f bits)",
                h.tile_bits, h.image_bits, h.exponent, h.batch, h.image_bits);
  return text;
}

}  // namespace

int fastest_batch(const std::vector<BatchTrial>& trials) {
  double best = 0;
  for (const BatchTrial& t : trials)
    if (t.fits()) best = std::max(best, t.images_per_s);
  for (const BatchTrial& t : trials)  // in the sweep's order: the smallest first
    if (t.fits() && t.images_per_s >= best * (1 - kTieFraction)) return t.batch;
  return 0;
}

HplBatch hpl_batch(const Dims& input) {
  HplBatch h;
  h.tile_bits = kHplTileBits;
  h.image_bits = double(input.size()) * kImageValueBits;
  h.exponent = int(std::lround(std::log2(h.tile_bits / h.image_bits)));
  h.batch = h.exponent > 0 ? 1 << std::min(h.exponent, 30) : 1;
  return h;
}

double scaled_lr(double config_lr, int config_batch, int global_batch) {
  return config_lr * double(global_batch) / double(config_batch);
}

std::vector<std::string> sweep_report(const BatchSweep& s) {
  std::vector<std::string> lines{"batch sweep per rank: " + s.method, s.limit};
  char head[96];
  std::snprintf(head, sizeof head, "%8s  %10s  %s", "batch", "images/s", "memory");
  lines.emplace_back(head);
  for (const BatchTrial& t : s.trials) lines.push_back(trial_line(t));
  char choice[256], micro[96] = "";
  if (s.accumulate > 1) std::snprintf(micro, sizeof micro, " x %d micro-batches ([train] accumulate)", s.accumulate);
  std::snprintf(choice, sizeof choice,
                "chosen batch: %d per rank%s (%d in all on %d rank%s): the fastest, ties within %.0f %% "
                "to the smaller",
                s.per_rank, micro, s.per_rank * s.accumulate * s.ranks, s.ranks, s.ranks == 1 ? "" : "s",
                kTieFraction * 100);
  lines.emplace_back(choice);
  lines.push_back(hpl_line(s.hpl));
  return lines;
}

}  // namespace convoy
