// JSONL writer: one record a line, flushed at once; a failed write is an error, not a silent
// gap in the curves.
#include "train/metrics_log.h"

#include "shared/error.h"

namespace convoy {

MetricsLog::MetricsLog(const std::string& path, bool append) : path_(path) {
  f_ = std::fopen(path.c_str(), append ? "a" : "w");
  if (!f_) fail_file(path, "cannot open the metrics file: " + errno_text());
}

MetricsLog::~MetricsLog() {
  if (f_) std::fclose(f_);
}

void MetricsLog::write(const nlohmann::json& j) {
  if (!f_) return;
  const std::string line = j.dump() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), f_) != line.size() || std::fflush(f_) != 0)
    fail_file(path_, "cannot write the metrics file: " + errno_text());
}

}  // namespace convoy
