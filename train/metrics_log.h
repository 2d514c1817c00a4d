// The JSONL metrics file: one JSON object a line (step lines, epoch lines), flushed as written
// so that plot.py can read a run that is still going.
#pragma once
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace convoy {

class MetricsLog {
 public:
  MetricsLog() = default;
  // Appends when resuming so that the file holds the whole run.
  MetricsLog(const std::string& path, bool append);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  void write(const nlohmann::json& j);

 private:
  std::string path_;
  FILE* f_ = nullptr;
};

}  // namespace convoy
