// The run's starting point, read before anything is built: a damaged checkpoint or a bad config
// stops the run before any loader or device is set up.
#include "train/run_spec.h"

#include "shared/atomic_file.h"
#include "shared/error.h"

namespace convoy {

NetConfig config_of(const Checkpoint& c, const std::string& path) {
  try {
    return parse_net_config(c.info.at("config_text").get<std::string>(), c.info.at("config_path").get<std::string>());
  } catch (const nlohmann::json::exception& e) {
    fail_file(path, std::string("checkpoint metadata: ") + e.what());
  }
}

RunSpec read_run_spec(const TrainOptions& o) {
  RunSpec s;
  if (!o.resume.empty()) {
    s.resume = read_checkpoint(o.resume);
    s.cfg = config_of(*s.resume, o.resume);
  } else {
    s.cfg = read_net_config(o.config);
  }
  TrainRecipe& rec = s.cfg.train;
  if (o.epochs > 0) rec.epochs = o.epochs;
  if (o.batch > 0) rec.batch = o.batch;
  s.seed = o.seed;
  if (s.resume) {
    const nlohmann::json& info = s.resume->info;
    s.seed = info.at("seed").get<uint64_t>();
    rec.batch = info.at("batch").get<int>();
    if (o.epochs <= 0) rec.epochs = info.at("epochs").get<int>();
  }
  return s;
}

Dims input_dims(const DatasetMeta& meta, const AugmentSpec& a) {
  return {int(meta.shape.channels), a.crop ? a.crop : int(meta.shape.height), a.crop ? a.crop : int(meta.shape.width)};
}

Net net_for_data(const NetConfig& cfg, const DatasetMeta& meta, const std::string& dir) {
  Net net(cfg, input_dims(meta, cfg.augment), int(meta.classes.size()));
  if (size_t(net.classes()) != meta.classes.size())
    fail_file(join_path(dir, kDatasetJson), "has " + std::to_string(meta.classes.size()) +
                                                " classes but the net's last fc layer has " +
                                                std::to_string(net.classes()) + " outputs");
  return net;
}

}  // namespace convoy
