// TOML -> NetConfig with file:line errors. Unknown keys are errors too, since a misspelt key
// silently falling back to its default is the most expensive config mistake on a GPU queue.
#include "train/net_config.h"

#include <toml++/toml.h>

#include <map>
#include <optional>
#include <set>

#include "shared/atomic_file.h"
#include "shared/error.h"
#include "train/layers/layer_keys.h"
#include "train/layers/registry.h"

namespace convoy {
namespace {

struct Reader {
  const std::string& path;
  [[noreturn]] void fail_at(const toml::node& n, const std::string& why) const {
    fail_file(path + ":" + std::to_string(n.source().begin.line), why);
  }
  [[noreturn]] void fail_line(int line, const std::string& why) const {
    fail_file(path + ":" + std::to_string(line), why);
  }
  int get_int(const toml::table& t, const char* key, int def, int lo, int hi) const {
    const toml::node* n = t.get(key);
    if (!n) return def;
    // Only an integer node is asked for its value: toml++ converts a float such as 4e96 to int64_t
    // without a range check, which is undefined behaviour.
    if (!n->is_integer()) fail_at(*n, std::string("'") + key + "' must be an integer");
    auto v = n->value<int64_t>();
    if (*v < lo || *v > hi)
      fail_at(*n, std::string("'") + key + "' = " + std::to_string(*v) + " is outside [" + std::to_string(lo) + ", " +
                      std::to_string(hi) + "]");
    return int(*v);
  }
  double get_num(const toml::table& t, const char* key, double def, double lo, double hi) const {
    const toml::node* n = t.get(key);
    if (!n) return def;
    auto v = n->value<double>();
    if (!(n->is_floating_point() || n->is_integer()) || !v) fail_at(*n, std::string("'") + key + "' must be a number");
    if (!(*v >= lo && *v <= hi))
      fail_at(*n, std::string("'") + key + "' = " + std::to_string(*v) + " is outside [" + std::to_string(lo) + ", " +
                      std::to_string(hi) + "]");
    return *v;
  }
  bool get_bool(const toml::table& t, const char* key, bool def) const {
    const toml::node* n = t.get(key);
    if (!n) return def;
    if (!n->is_boolean()) fail_at(*n, std::string("'") + key + "' must be true or false");
    return *n->value<bool>();
  }
  std::string get_str(const toml::table& t, const char* key, const std::string& def,
                      const std::set<std::string>& choices) const {
    const toml::node* n = t.get(key);
    if (!n) return def;
    if (!n->is_string()) fail_at(*n, std::string("'") + key + "' must be a string");
    std::string v = *n->value<std::string>();
    if (!choices.empty() && !choices.count(v)) {
      std::string list;
      for (auto& c : choices) list += (list.empty() ? "" : ", ") + c;
      fail_at(*n, std::string("'") + key + "' = \"" + v + "\" is not one of: " + list);
    }
    return v;
  }
  // A string naming one of `names`' values.
  template <typename E>
  E get_enum(const toml::table& t, const char* key, E def, const std::map<std::string, E>& names) const {
    if (!t.get(key)) return def;
    std::set<std::string> choices;
    for (const auto& kv : names) choices.insert(kv.first);
    return names.at(get_str(t, key, "", choices));
  }
  // A two-number array [lo, hi] with lo <= hi, each within [min, max].
  void get_range(const toml::table& t, const char* key, double out[2], double min, double max) const {
    const toml::node* n = t.get(key);
    if (!n) return;
    const toml::array* a = n->as_array();
    const std::string why = std::string("'") + key + "' must be [low, high] with " + std::to_string(min) +
                            " <= low <= high <= " + std::to_string(max);
    if (!a || a->size() != 2) fail_at(*n, why);
    double v[2];
    for (size_t i = 0; i < 2; ++i) {
      auto x = (*a)[i].value<double>();
      if (!x || !((*a)[i].is_floating_point() || (*a)[i].is_integer())) fail_at(*n, why);
      v[i] = *x;
    }
    if (!(v[0] >= min && v[0] <= v[1] && v[1] <= max)) fail_at(*n, why);
    out[0] = v[0], out[1] = v[1];
  }
  void only_keys(const toml::table& t, const std::set<std::string>& ok, const std::string& where) const {
    for (auto&& [k, v] : t)
      if (!ok.count(std::string(k.str()))) fail_at(v, "unknown key '" + std::string(k.str()) + "' in " + where);
  }
};

// One [[layer]] table as its op reads it (LayerKeys), through the Reader's checks.
class TableKeys final : public LayerKeys {
 public:
  TableKeys(const Reader& r, const toml::table& t, const LayerSpec& s) : r_(r), t_(t), s_(s) {}
  const std::string& name() const override { return s_.name; }
  int get_int(const char* key, int def, int lo, int hi) const override { return r_.get_int(t_, key, def, lo, hi); }
  double get_num(const char* key, double def, double lo, double hi) const override {
    return r_.get_num(t_, key, def, lo, hi);
  }
  bool get_bool(const char* key, bool def) const override { return r_.get_bool(t_, key, def); }
  std::optional<std::string> get_string(const char* key) const override {
    const toml::node* n = t_.get(key);
    if (!n || !n->is_string()) return std::nullopt;
    return *n->value<std::string>();
  }
  [[noreturn]] void fail(const std::string& why) const override { r_.fail_line(s_.line, why); }
  [[noreturn]] void fail_at(const char* key, const std::string& why) const override { r_.fail_at(*t_.get(key), why); }

 private:
  const Reader& r_;
  const toml::table& t_;
  const LayerSpec& s_;
};

void read_net_table(const Reader& r, const toml::table& net, NetConfig& cfg) {
  r.only_keys(net, {"name", "input", "init", "classes", "fuse", "zero_init_residual"}, "[net]");
  cfg.fuse = r.get_bool(net, "fuse", cfg.fuse);
  cfg.zero_init_residual = r.get_bool(net, "zero_init_residual", cfg.zero_init_residual);
  cfg.classes = r.get_int(net, "classes", 0, 1, 1 << 24);
  cfg.name = r.get_str(net, "name", "", {});
  cfg.init = r.get_enum<InitRule>(net, "init", cfg.init,
                                  {{"default", InitRule::fan_in_uniform}, {"kaiming", InitRule::kaiming}});
  if (const toml::node* in = net.get("input")) {
    // Bounded as [data] crop is: a negative or wrapped side would reach the net as a huge size.
    const toml::array* a = in->as_array();
    int64_t v[3] = {0, 0, 0};
    for (size_t i = 0; a && a->size() == 3 && i < 3; ++i)
      if ((*a)[i].is_integer()) v[i] = *(*a)[i].value<int64_t>();
    for (int64_t x : v)
      if (x < 1 || x > (1 << 16)) r.fail_at(*in, "'input' must be [channels, height, width], each 1 to 65536");
    cfg.input_c = int(v[0]);
    cfg.input_h = int(v[1]);
    cfg.input_w = int(v[2]);
  }
}

// optimizer = "lars": its keys, and MLPerf's choices as the defaults of the shared ones: its skip
// list for the weight decay exclusions (batch norm's parameters and the biases take neither decay
// nor trust ratio) and momentum without Nesterov. Its keys under another optimiser would be silently
// ignored, so they are refused.
void read_lars_keys(const Reader& r, const toml::table& t, TrainRecipe& tr) {
  if (tr.optimizer != OptimizerKind::lars) {
    for (const char* key : {"lars_trust", "lars_eps"})
      if (const toml::node* n = t.get(key))
        r.fail_at(*n, std::string("'") + key + "' applies only to optimizer = \"lars\"");
    return;
  }
  tr.weight_decay_norm = tr.weight_decay_bias = false;
  tr.nesterov = r.get_bool(t, "nesterov", false);
  tr.lars_trust = r.get_num(t, "lars_trust", tr.lars_trust, 0, 1);
  // A trust coefficient of 0 would leave every adapted tensor where it started.
  if (tr.lars_trust <= 0) r.fail_at(*t.get("lars_trust"), "'lars_trust' must be above 0 (0 < eta <= 1)");
  tr.lars_eps = r.get_num(t, "lars_eps", tr.lars_eps, 0, 1);
}

void read_train_table(const Reader& r, const toml::table& t, TrainRecipe& tr) {
  std::set<std::string> keys = {"epochs",      "batch",         "optimizer", "lr",         "momentum",
                                "nesterov",    "weight_decay",  "beta1",     "beta2",      "adam_eps",
                                "schedule",    "warmup_epochs", "pct_start", "div_factor", "final_div_factor",
                                "step_epochs", "gamma",         "min_lr"};
  keys.insert("accumulate");
  keys.insert({"weight_decay_norm", "weight_decay_bias", "label_smoothing", "ema", "eval_flip"});  // the references'
  keys.insert({"lars_trust", "lars_eps"});
  r.only_keys(t, keys, "[train]");
  tr.epochs = r.get_int(t, "epochs", tr.epochs, 1, kMaxEpochs);
  tr.batch = r.get_int(t, "batch", tr.batch, 1, kMaxBatch);
  tr.accumulate = r.get_int(t, "accumulate", tr.accumulate, 1, kMaxBatch);
  tr.optimizer = r.get_enum<OptimizerKind>(t, "optimizer", tr.optimizer,
                                           {{"sgd", OptimizerKind::sgd},
                                            {"adam", OptimizerKind::adam},
                                            {"adamw", OptimizerKind::adamw},
                                            {"lars", OptimizerKind::lars}});
  tr.lr = r.get_num(t, "lr", tr.lr, 0, 1e3);
  tr.momentum = r.get_num(t, "momentum", tr.momentum, 0, 1);
  tr.nesterov = r.get_bool(t, "nesterov", tr.nesterov);
  tr.weight_decay = r.get_num(t, "weight_decay", tr.weight_decay, 0, 1);
  read_lars_keys(r, t, tr);
  tr.weight_decay_norm = r.get_bool(t, "weight_decay_norm", tr.weight_decay_norm);
  tr.weight_decay_bias = r.get_bool(t, "weight_decay_bias", tr.weight_decay_bias);
  tr.label_smoothing = r.get_num(t, "label_smoothing", tr.label_smoothing, 0, 1);
  // A target of eps / classes everywhere (eps = 1) says nothing about the label.
  if (tr.label_smoothing >= 1) r.fail_at(*t.get("label_smoothing"), "'label_smoothing' must be below 1 (0 <= eps < 1)");
  tr.ema = r.get_num(t, "ema", tr.ema, 0, 1);
  // A decay of 1 would keep the starting weights for ever.
  if (tr.ema >= 1) r.fail_at(*t.get("ema"), "'ema' must be below 1 (0 <= decay < 1; 0: no average)");
  tr.eval_flip = r.get_bool(t, "eval_flip", tr.eval_flip);
  tr.beta1 = r.get_num(t, "beta1", tr.beta1, 0, 1);
  tr.beta2 = r.get_num(t, "beta2", tr.beta2, 0, 1);
  tr.adam_eps = r.get_num(t, "adam_eps", tr.adam_eps, 0, 1);
  tr.schedule = r.get_enum<ScheduleKind>(t, "schedule", tr.schedule,
                                         {{"constant", ScheduleKind::constant},
                                          {"step", ScheduleKind::step},
                                          {"cosine", ScheduleKind::cosine},
                                          {"onecycle", ScheduleKind::onecycle}});
  tr.warmup_epochs = r.get_num(t, "warmup_epochs", tr.warmup_epochs, 0, 1e5);
  tr.pct_start = r.get_num(t, "pct_start", tr.pct_start, 0, 1);
  tr.div_factor = r.get_num(t, "div_factor", tr.div_factor, 1, 1e9);
  tr.final_div_factor = r.get_num(t, "final_div_factor", tr.final_div_factor, 1, 1e12);
  tr.step_epochs = r.get_int(t, "step_epochs", tr.step_epochs, 1, 100000);
  tr.gamma = r.get_num(t, "gamma", tr.gamma, 0, 1);
  tr.min_lr = r.get_num(t, "min_lr", tr.min_lr, 0, 1e3);
}

// [data] progressive = { min_res = 160, max_res = 192, start_ramp = 65, end_ramp = 76 } (or a
// [data.progressive] table): FFCV's four keys, each needed, since none has a default that means
// anything alone. The rules between them and the other [data] keys are augment_problem's.
void read_progressive(const Reader& r, const toml::node& n, ProgressiveResize& p) {
  const toml::table* t = n.as_table();
  if (!t) r.fail_at(n, "'progressive' must be a table { min_res, max_res, start_ramp, end_ramp }");
  r.only_keys(*t, {"min_res", "max_res", "start_ramp", "end_ramp"}, "[data] progressive");
  for (const char* key : {"min_res", "max_res", "start_ramp", "end_ramp"})
    if (!t->get(key))
      r.fail_at(n, std::string("'progressive' needs ") + key + " (it takes min_res, max_res, " +
                       "start_ramp and end_ramp)");
  p.min_res = r.get_int(*t, "min_res", 0, 1, kMaxCrop);
  p.max_res = r.get_int(*t, "max_res", 0, 1, kMaxCrop);
  p.start_ramp = r.get_int(*t, "start_ramp", 0, 0, kMaxRampEpoch);
  p.end_ramp = r.get_int(*t, "end_ramp", 0, 0, kMaxRampEpoch);
}

void read_data_table(const Reader& r, const toml::table& d, AugmentSpec& a) {
  r.only_keys(d, {"crop", "pad", "flip", "random_resized_crop", "scale", "ratio", "eval_resize", "progressive"},
              "[data]");
  a.crop = r.get_int(d, "crop", 0, 0, kMaxCrop);
  a.pad = r.get_int(d, "pad", 0, 0, kMaxPad);
  a.flip = r.get_bool(d, "flip", false);
  a.random_resized_crop = r.get_bool(d, "random_resized_crop", false);
  r.get_range(d, "scale", a.scale, kScaleRange[0], kScaleRange[1]);
  r.get_range(d, "ratio", a.ratio, kRatioRange[0], kRatioRange[1]);
  a.eval_resize = r.get_int(d, "eval_resize", 0, 0, kMaxEvalResize);
  if (const toml::node* p = d.get("progressive")) read_progressive(r, *p, a.progressive);
  // Each range is checked above at its key's line; what is left are the rules between the keys,
  // the same ones that the Python module's and bench-loader's options meet.
  if (const std::string problem = augment_problem(a); !problem.empty()) {
    const toml::node* p = d.get("progressive");
    r.fail_at(p && problem.rfind("progressive", 0) == 0 ? *p : d, "[data] " + problem);
  }
}

// The op a layer's `type` names, or a mistake that lists the types there are.
const Op& op_of(const Reader& r, const toml::table& t, int line, size_t i) {
  const toml::node* type = t.get("type");
  if (!type || !type->is_string()) r.fail_line(line, "layer " + std::to_string(i + 1) + " needs type = \"...\"");
  const std::string name = *type->value<std::string>();
  if (const Op* op = find_op(name)) return *op;
  std::string list;
  for (const Op* op : registered_ops()) list += (list.empty() ? "" : ", ") + std::string(op->type());
  r.fail_at(*type, "unknown layer type '" + name + "' (known: " + list + ")");
}

std::vector<std::string> read_inputs(const Reader& r, const toml::table& t) {
  std::vector<std::string> inputs;
  const toml::node* in = t.get("inputs");
  if (!in) return inputs;
  if (in->is_string()) {
    inputs.push_back(*in->value<std::string>());
  } else if (const toml::array* a = in->as_array()) {
    for (auto&& e : *a) {
      if (!e.is_string()) r.fail_at(e, "'inputs' must hold layer names (strings)");
      inputs.push_back(*e.value<std::string>());
    }
  } else {
    r.fail_at(*in, "'inputs' must be a layer name or a list of them");
  }
  return inputs;
}

// Layer i: its type, name (unique; by default the type and its place), keys, inputs, then the
// keys of its type as its op reads them.
LayerSpec read_layer(const Reader& r, const toml::node& node, size_t i, std::set<std::string>& names) {
  const toml::table* t = node.as_table();
  if (!t) r.fail_at(node, "each 'layer' must be a table ([[layer]])");
  LayerSpec s;
  s.line = int(t->source().begin.line);
  s.op = &op_of(r, *t, s.line, i);
  const std::string type = s.op->type();
  s.name = r.get_str(*t, "name", type + std::to_string(i + 1), {});
  if (!names.insert(s.name).second) r.fail_line(s.line, "layer name '" + s.name + "' is used twice");
  std::set<std::string> keys = {"name", "type", "inputs"};
  for (const std::string& k : s.op->keys()) keys.insert(k);
  r.only_keys(*t, keys, "a " + type + " layer");
  s.inputs = read_inputs(r, *t);
  s.params = s.op->parse(TableKeys(r, *t, s));
  return s;
}

// Every layer, and the loss last and only there.
void read_layers(const Reader& r, const toml::array* layers, NetConfig& cfg) {
  if (!layers || layers->empty()) fail_file(r.path, "no [[layer]] tables: a net needs at least one layer");
  std::set<std::string> names;
  for (size_t i = 0; i < layers->size(); ++i) cfg.layers.push_back(read_layer(r, (*layers)[i], i, names));
  std::string losses;
  for (const Op* op : registered_ops())
    if (op->is_loss()) losses += (losses.empty() ? "" : " or ") + std::string(op->type());
  if (!cfg.layers.back().op->is_loss())
    r.fail_line(cfg.layers.back().line, "the last layer must be " + losses + " (the loss)");
  for (size_t i = 0; i + 1 < cfg.layers.size(); ++i)
    if (cfg.layers[i].op->is_loss())
      r.fail_line(cfg.layers[i].line, std::string(cfg.layers[i].op->type()) + " may only be the last layer");
}

}  // namespace

NetConfig parse_net_config(const std::string& text, const std::string& path) {
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    fail_file(path + ":" + std::to_string(e.source().begin.line), std::string(e.description()));
  }
  Reader r{path};
  NetConfig cfg;
  cfg.path = path;
  cfg.text = text;
  r.only_keys(root, {"net", "train", "data", "layer"}, "the top level");
  if (const toml::table* net = root["net"].as_table()) read_net_table(r, *net, cfg);
  if (const toml::table* t = root["train"].as_table()) read_train_table(r, *t, cfg.train);
  if (const toml::table* d = root["data"].as_table()) read_data_table(r, *d, cfg.augment);
  read_layers(r, root["layer"].as_array(), cfg);
  if (cfg.name.empty()) cfg.name = path;
  return cfg;
}

NetConfig read_net_config(const std::string& path) {
  if (!file_exists(path)) fail_file(path, "config file not found");
  return parse_net_config(read_whole_file(path), path);
}

}  // namespace convoy
