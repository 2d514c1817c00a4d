// What a training run starts from: the net's config (from --config, or the one a checkpoint
// carries), its recipe with the command line's overrides, the seed, shuffle window, data and
// checkpoint path; when resuming, the checkpoint, whose record every input given must agree with.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "shared/dataset_meta.h"
#include "train/checkpoint.h"
#include "train/data_identity.h"
#include "train/net.h"
#include "train/net_config.h"
#include "train/train_options.h"

namespace convoy {

struct RunSpec {
  NetConfig cfg;  // cfg.train: the epochs and batch the run uses
  uint64_t seed = 1;
  int window_files = 4;
  // How training's samples are dealt to ranks (epoch_plan.h).
  SampleOrder order = SampleOrder::local;
  std::string data_dir, val_dir;    // as given, or as the checkpoint recorded them ("": none)
  DataIdentity data;                // the training data's, read when the run starts
  std::optional<DataIdentity> val;  // the validation data's, when there is one
  std::string checkpoint;           // where the run saves ("": nowhere)
  std::optional<Checkpoint> resume;
  bool batch_auto = false;  // the batch was chosen by --batch auto, and cfg.train.lr scaled to it
  // The backend it trains with: --precision, --grad-comm (resolved, never automatic), --input-fold,
  // --cudnn-algos, --cudnn-workspace and --bucket-mb set the arithmetic, and a resumed run keeps the
  // checkpoint's; the device is --device's until TrainRun resolves it (cpu or cuda, as recorded), and
  // a resumed run stays on the checkpoint's unless --device is given.
  BackendOptions backend;
};

// A fresh run: the config with --epochs and --batch over its recipe. A resumed run: the
// checkpoint's config, seed, batch, shuffle window, sample order, arithmetic (RunSpec::backend),
// data and validation set, each refused in one line when given again otherwise (or, for the data, when it has changed
// since); --epochs may extend it; it saves to --checkpoint, else to the checkpoint it resumed from. Every rank reaches
// the same verdict without any collective call; `ranks` x [train] accumulate must divide the global
// batch (a resumed run keeps the checkpoint's on any number of ranks).
RunSpec read_run_spec(const TrainOptions& o, int ranks);
// The backend options the run trains with: the spec's, with `given`'s CUDA graph and bucket-update
// choices (which change no result).
BackendOptions backend_for(const BackendOptions& given, const RunSpec& s);
// The part of a checkpoint's record that says what the run was made from (config, seed, batch,
// epochs, ranks, shuffle window, sample order, arithmetic and device, training and validation data), which
// read_run_spec checks.
nlohmann::json run_record(const RunSpec& s, int ranks);
// The config a checkpoint carries; `path` names the checkpoint in messages.
NetConfig config_of(const Checkpoint& c, const std::string& path);
// The data a checkpoint's net was trained on. A checkpoint of an older train, which did not record
// it, is refused: neither a resume nor an evaluation could check its inputs.
DataIdentity trained_on(const Checkpoint& c, const std::string& path);

// The samples as the net sees them: the stored shape, or the augmentation's crop.
Dims input_dims(const ImageShape& shape, const AugmentSpec& a);
// Refuses a config whose [net] input disagrees with the samples of the data in `dir`.
void check_declared_input(const NetConfig& cfg, const Dims& in, const std::string& dir);
// Refuses, in one line naming the layer and the side, a net that cannot run at every side
// [data] progressive may train at (Net::nodes_at).
void check_progressive_sizes(const Net& net, const ProgressiveResize& p);
// The net for data of this shape and classes (those of the dataset in `dir`), whose classes must be
// as many as the net's outputs, and which runs at every side of its [data] progressive.
Net net_for_data(const NetConfig& cfg, const ImageShape& shape, size_t classes, const std::string& dir);

}  // namespace convoy
