// What a training run starts from: the net's config (from --config, or the one a checkpoint
// carries), its recipe with the command line's overrides, the seed and the checkpoint to resume;
// and the net a config builds for a dataset.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "shared/dataset_meta.h"
#include "train/checkpoint.h"
#include "train/net.h"
#include "train/net_config.h"
#include "train/train_options.h"

namespace convoy {

struct RunSpec {
  NetConfig cfg;  // cfg.train: the epochs and batch the run uses
  uint64_t seed = 1;
  std::optional<Checkpoint> resume;
};

// A resumed run keeps its checkpoint's seed and batch, and its epochs unless --epochs says otherwise.
RunSpec read_run_spec(const TrainOptions& o);
// The config a checkpoint carries; `path` names the checkpoint in messages.
NetConfig config_of(const Checkpoint& c, const std::string& path);

// The samples as the net sees them: the stored shape, or the augmentation's crop.
Dims input_dims(const DatasetMeta& meta, const AugmentSpec& a);
// The net for the dataset in `dir`, whose classes must be as many as the net's outputs.
Net net_for_data(const NetConfig& cfg, const DatasetMeta& meta, const std::string& dir);

}  // namespace convoy
