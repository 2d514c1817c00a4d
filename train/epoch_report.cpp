// The epoch's lines and record. The input stall is the share of the training time spent waiting
// for the loader; the peak resident memory is the process's so far; the bytes on the wire are this
// rank's, per step.
#include "train/epoch_report.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "shared/log.h"

namespace convoy {
namespace {

long long peak_rss_bytes() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return (long long)u.ru_maxrss * 1024;  // kilobytes on Linux
}

double train_loss(const EpochReport& r) { return r.sums.loss / std::max(1.0, r.sums.samples); }
double train_acc(const EpochReport& r) { return r.sums.correct / std::max(1.0, r.sums.samples); }
double comm_bytes_per_step(const PhaseTimes& t) { return t.steps ? t.comm_bytes / double(t.steps) : 0.0; }

}  // namespace

void log_epoch(const EpochReport& r) {
  char val_text[160] = "";
  if (r.eval)
    std::snprintf(val_text, sizeof val_text, " | test loss %.4f top-1 %.4f top-5 %.4f", r.eval->loss, r.eval->top1,
                  r.eval->top5);
  char skip_text[64] = "";
  if (r.count_skipped)
    std::snprintf(skip_text, sizeof skip_text, " | %lld steps skipped (loss not finite)", r.sums.skipped);
  log_info("epoch %d/%d: loss %.4f train acc %.4f%s%s | %.1f s (train %.1f s, %.0f img/s)", r.epoch + 1, r.epochs,
           train_loss(r), train_acc(r), val_text, skip_text, r.seconds, r.train_seconds,
           r.timed_samples / r.train_seconds);
}

void log_breakdown(const EpochReport& r) {
  const PhaseTimes& t = r.times;
  char idle[48] = "";
  if (t.idle) std::snprintf(idle, sizeof idle, ", t_idle %.2f s", *t.idle);
  char clipped[96] = "";
  if (t.fp8_clipped.value_or(0) > 0)
    std::snprintf(clipped, sizeof clipped, ", %lld fp8 buckets clipped at twice the step before's largest",
                  *t.fp8_clipped);
  log_info(
      "epoch %d breakdown: t_io %.2f s, t_h2d %.2f s, t_fwd %.2f s, t_bwd %.2f s, t_update %.2f s, "
      "t_comm_exposed %.2f s (%.2f MB a step on the wire%s)%s; input stall %.2f %%, peak RSS %.0f MiB",
      r.epoch + 1, r.t_io, t.h2d, t.fwd, t.bwd, t.update, t.comm_exposed, comm_bytes_per_step(t) / 1e6, clipped, idle,
      100 * r.t_io / r.train_seconds, double(peak_rss_bytes()) / (1 << 20));
}

nlohmann::json epoch_record(const EpochReport& r) {
  const PhaseTimes& t = r.times;
  nlohmann::json j = {{"kind", "epoch"},
                      {"epoch", r.epoch + 1},
                      {"global_step", r.global_step},
                      {"train_loss", train_loss(r)},
                      {"train_acc", train_acc(r)},
                      {"seconds", r.seconds},
                      {"train_seconds", r.train_seconds},
                      {"t_io", r.t_io},
                      {"t_io_first", r.t_io_first},
                      {"t_h2d", t.h2d},
                      {"t_fwd", t.fwd},
                      {"t_bwd", t.bwd},
                      {"t_update", t.update},
                      {"t_comm_exposed", t.comm_exposed},
                      {"comm_bytes_per_step", comm_bytes_per_step(t)},
                      {"images", r.timed_samples},
                      {"images_per_second", r.timed_samples / r.train_seconds},
                      {"input_stall", r.t_io / r.train_seconds},
                      {"peak_rss_bytes", peak_rss_bytes()},
                      {"skipped_steps", r.sums.skipped}};
  if (t.idle) j["t_idle"] = *t.idle;
  if (t.fp8_clipped) j["fp8_clipped_buckets"] = *t.fp8_clipped;
  if (r.train_side > 0) j["train_side"] = r.train_side;
  if (!r.bucket_ready.empty()) j["bucket_ready_profile"] = r.bucket_ready;
  if (r.eval) {
    j["test_loss"] = r.eval->loss;
    j["test_top1"] = r.eval->top1;
    j["test_top5"] = r.eval->top5;
  }
  return j;
}

}  // namespace convoy
