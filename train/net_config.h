// A net and its training recipe as read from a TOML config: one [[layer]] table per layer, named,
// with optional `inputs` so that residual nets can be written, plus [train] and [data] tables.
// Every mistake is reported as "<file>:<line>: <reason>" before any training starts.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "input/augment_spec.h"

namespace convoy {

class Op;         // train/layers/op.h
struct OpParams;  // likewise

struct LayerSpec {
  std::string name;
  const Op* op = nullptr;                  // the layer's type (train/layers/registry.h); never null once parsed
  std::vector<std::string> inputs;         // empty: the previous layer (or the data for the first)
  int line = 0;                            // in the config file, for messages
  std::shared_ptr<const OpParams> params;  // the keys of its type, as its op read them (null: none)
};

// The recipe's and the net's named choices, read from the config once.
enum class OptimizerKind { sgd, adam, adamw, lars };
enum class ScheduleKind { constant, step, cosine, onecycle };
enum class InitRule { fan_in_uniform, kaiming };  // "default": PyTorch's uniform +-1/sqrt(fan_in)

// The largest [train] epochs and batch (and train's --epochs and --batch).
constexpr int kMaxEpochs = 100000, kMaxBatch = 1 << 20;

struct TrainRecipe {
  int epochs = 15, batch = 128;
  // Gradient accumulation: each rank trains its share of the global batch as this many consecutive
  // micro-batches, their gradients summed before one all-reduce and one optimiser step.
  int accumulate = 1;
  OptimizerKind optimizer = OptimizerKind::sgd;
  double lr = 0.05, momentum = 0.9, weight_decay = 5e-4;
  // false: batch norm's parameters (weight_decay_norm) and every bias, batch norm's beta included
  // (weight_decay_bias), take no weight decay, as torchvision's --norm-weight-decay 0 and
  // --bias-weight-decay 0. Under lars they also take no trust ratio (MLPerf's skip list), and a
  // config's defaults are then false (read_net_config; this struct's stay true).
  bool weight_decay_norm = true, weight_decay_bias = true;
  // lars (optimizer_update.h): the trust coefficient eta (0 < eta <= 1) and the epsilon of the trust
  // ratio's denominator; momentum, nesterov and weight_decay as for sgd, but a config's default of
  // nesterov is then false (MLPerf's).
  double lars_trust = 0.001, lars_eps = 0;
  double label_smoothing = 0;  // the loss's target: (1 - eps) * onehot + eps / classes (0 <= eps < 1)
  // The decay of the weights' moving average (weight_average.h), which evaluation uses; 0: none.
  double ema = 0;
  // Evaluation scores the mean of the softmax outputs of each image and of its mirror image.
  bool eval_flip = false;
  bool nesterov = true;
  double beta1 = 0.9, beta2 = 0.999, adam_eps = 1e-8;
  ScheduleKind schedule = ScheduleKind::onecycle;
  double warmup_epochs = 0;                                         // linear warm-up before step / cosine / constant
  double pct_start = 0.3, div_factor = 25, final_div_factor = 1e4;  // onecycle
  int step_epochs = 30;                                             // step
  double gamma = 0.1;                                               // step
  double min_lr = 0;                                                // cosine
};

struct NetConfig {
  std::string path, name;
  InitRule init = InitRule::fan_in_uniform;   // kaiming: normal, sqrt(2/fan_in), zero bias
  int input_c = 0, input_h = 0, input_w = 0;  // [net] input = [c, h, w]: for --print-net without data
  bool fuse = true;                           // [net] fuse: run a conv's only-consumer ReLU inside the conv
  // [net] zero_init_residual: each residual block's last batch norm starts with its scale (gamma) at
  // 0, as torchvision's resnet(zero_init_residual=True); see Net::residual_norms.
  bool zero_init_residual = false;
  int classes = 0;   // [net] classes: for units = "classes" under --print-net without data
  std::string text;  // kept so that a checkpoint can rebuild the net by itself
  std::vector<LayerSpec> layers;
  TrainRecipe train;
  AugmentSpec augment;
};

NetConfig parse_net_config(const std::string& text, const std::string& path);
NetConfig read_net_config(const std::string& path);

}  // namespace convoy
