// TOML -> NetConfig with file:line errors. Unknown keys are errors too, since a misspelt key
// silently falling back to its default is the most expensive config mistake on a GPU queue.
#include "train/net_config.h"

#include <toml++/toml.h>

#include <map>
#include <set>

#include "shared/atomic_file.h"
#include "shared/error.h"

namespace convoy {
namespace {

const std::map<std::string, LayerKind>& kinds() {
  static const std::map<std::string, LayerKind> m = {
      {"conv", LayerKind::conv},           {"max_pool", LayerKind::max_pool},
      {"avg_pool", LayerKind::avg_pool},   {"global_avg_pool", LayerKind::global_avg_pool},
      {"fc", LayerKind::fc},               {"relu", LayerKind::relu},
      {"batch_norm", LayerKind::batch_norm}, {"dropout", LayerKind::dropout},
      {"add", LayerKind::add},             {"flatten", LayerKind::flatten},
      {"softmax_xent", LayerKind::softmax_xent}};
  return m;
}

std::set<std::string> allowed_keys(LayerKind k) {
  std::set<std::string> s = {"name", "type", "inputs"};
  switch (k) {
    case LayerKind::conv: s.insert({"filters", "kernel", "stride", "pad", "groups", "bias"}); break;
    case LayerKind::max_pool:
    case LayerKind::avg_pool: s.insert({"kernel", "stride", "pad"}); break;
    case LayerKind::fc: s.insert({"units", "bias"}); break;
    case LayerKind::dropout: s.insert("p"); break;
    case LayerKind::batch_norm: s.insert({"eps", "momentum"}); break;
    default: break;
  }
  return s;
}

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
      fail_at(*n, std::string("'") + key + "' = " + std::to_string(*v) + " is outside [" +
                      std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return int(*v);
  }
  double get_num(const toml::table& t, const char* key, double def, double lo, double hi) const {
    const toml::node* n = t.get(key);
    if (!n) return def;
    auto v = n->value<double>();
    if (!(n->is_floating_point() || n->is_integer()) || !v)
      fail_at(*n, std::string("'") + key + "' must be a number");
    if (!(*v >= lo && *v <= hi))
      fail_at(*n, std::string("'") + key + "' = " + std::to_string(*v) + " is outside [" +
                      std::to_string(lo) + ", " + std::to_string(hi) + "]");
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
      if (!ok.count(std::string(k.str())))
        fail_at(v, "unknown key '" + std::string(k.str()) + "' in " + where);
  }
};

}  // namespace

const char* layer_kind_name(LayerKind k) {
  for (auto& [name, kind] : kinds())
    if (kind == k) return name.c_str();
  return "?";
}

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

  if (const toml::table* net = root["net"].as_table()) {
    r.only_keys(*net, {"name", "input", "init", "classes", "fuse"}, "[net]");
    cfg.fuse = r.get_bool(*net, "fuse", cfg.fuse);
    cfg.classes = r.get_int(*net, "classes", 0, 1, 1 << 24);
    cfg.name = r.get_str(*net, "name", "", {});
    cfg.init = r.get_str(*net, "init", cfg.init, {"default", "kaiming"});
    if (const toml::node* in = net->get("input")) {
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
  if (const toml::table* t = root["train"].as_table()) {
    r.only_keys(*t, {"epochs", "batch", "optimizer", "lr", "momentum", "nesterov", "weight_decay",
                     "beta1", "beta2", "adam_eps", "schedule", "warmup_epochs", "pct_start",
                     "div_factor", "final_div_factor", "step_epochs", "gamma", "min_lr"},
                "[train]");
    TrainRecipe& tr = cfg.train;
    tr.epochs = r.get_int(*t, "epochs", tr.epochs, 1, 100000);
    tr.batch = r.get_int(*t, "batch", tr.batch, 1, 1 << 20);
    tr.optimizer = r.get_str(*t, "optimizer", tr.optimizer, {"sgd", "adam", "adamw"});
    tr.lr = r.get_num(*t, "lr", tr.lr, 0, 1e3);
    tr.momentum = r.get_num(*t, "momentum", tr.momentum, 0, 1);
    tr.nesterov = r.get_bool(*t, "nesterov", tr.nesterov);
    tr.weight_decay = r.get_num(*t, "weight_decay", tr.weight_decay, 0, 1);
    tr.beta1 = r.get_num(*t, "beta1", tr.beta1, 0, 1);
    tr.beta2 = r.get_num(*t, "beta2", tr.beta2, 0, 1);
    tr.adam_eps = r.get_num(*t, "adam_eps", tr.adam_eps, 0, 1);
    tr.schedule = r.get_str(*t, "schedule", tr.schedule, {"constant", "step", "cosine", "onecycle"});
    tr.warmup_epochs = r.get_num(*t, "warmup_epochs", tr.warmup_epochs, 0, 1e5);
    tr.pct_start = r.get_num(*t, "pct_start", tr.pct_start, 0, 1);
    tr.div_factor = r.get_num(*t, "div_factor", tr.div_factor, 1, 1e9);
    tr.final_div_factor = r.get_num(*t, "final_div_factor", tr.final_div_factor, 1, 1e12);
    tr.step_epochs = r.get_int(*t, "step_epochs", tr.step_epochs, 1, 100000);
    tr.gamma = r.get_num(*t, "gamma", tr.gamma, 0, 1);
    tr.min_lr = r.get_num(*t, "min_lr", tr.min_lr, 0, 1e3);
  }
  if (const toml::table* d = root["data"].as_table()) {
    r.only_keys(*d, {"crop", "pad", "flip", "random_resized_crop", "scale", "ratio", "eval_resize"}, "[data]");
    AugmentSpec& a = cfg.augment;
    a.crop = r.get_int(*d, "crop", 0, 0, 1 << 16);
    a.pad = r.get_int(*d, "pad", 0, 0, 1 << 10);
    a.flip = r.get_bool(*d, "flip", false);
    a.random_resized_crop = r.get_bool(*d, "random_resized_crop", false);
    r.get_range(*d, "scale", a.scale, 1e-6, 1);
    r.get_range(*d, "ratio", a.ratio, 1e-3, 1e3);
    a.eval_resize = r.get_int(*d, "eval_resize", 0, 0, 1 << 16);
    if ((a.random_resized_crop || a.eval_resize) && a.crop == 0)
      r.fail_at(*d, "[data] random_resized_crop and eval_resize need crop = <output side>");
    if (a.random_resized_crop && a.pad)
      r.fail_at(*d, "[data] random_resized_crop takes no pad");
    if (a.eval_resize && a.eval_resize < a.crop)
      r.fail_at(*d, "[data] eval_resize must be at least crop");
  }

  const toml::array* layers = root["layer"].as_array();
  if (!layers || layers->empty()) fail_file(path, "no [[layer]] tables: a net needs at least one layer");
  std::set<std::string> names;
  for (size_t i = 0; i < layers->size(); ++i) {
    const toml::table* t = (*layers)[i].as_table();
    if (!t) r.fail_at((*layers)[i], "each 'layer' must be a table ([[layer]])");
    LayerSpec s;
    s.line = int(t->source().begin.line);
    const toml::node* type = t->get("type");
    if (!type || !type->is_string()) r.fail_line(s.line, "layer " + std::to_string(i + 1) + " needs type = \"...\"");
    const std::string tname = *type->value<std::string>();
    auto k = kinds().find(tname);
    if (k == kinds().end()) {
      std::string list;
      for (auto& [n, kk] : kinds()) list += (list.empty() ? "" : ", ") + n;
      r.fail_at(*type, "unknown layer type '" + tname + "' (known: " + list + ")");
    }
    s.kind = k->second;
    s.name = r.get_str(*t, "name", tname + std::to_string(i + 1), {});
    if (!names.insert(s.name).second) r.fail_line(s.line, "layer name '" + s.name + "' is used twice");
    r.only_keys(*t, allowed_keys(s.kind), "a " + tname + " layer");
    if (const toml::node* in = t->get("inputs")) {
      if (in->is_string()) {
        s.inputs.push_back(*in->value<std::string>());
      } else if (const toml::array* a = in->as_array()) {
        for (auto&& e : *a) {
          if (!e.is_string()) r.fail_at(e, "'inputs' must hold layer names (strings)");
          s.inputs.push_back(*e.value<std::string>());
        }
      } else {
        r.fail_at(*in, "'inputs' must be a layer name or a list of them");
      }
    }
    switch (s.kind) {
      case LayerKind::conv:
        s.filters = r.get_int(*t, "filters", 0, 1, 1 << 16);
        if (s.filters == 0) r.fail_line(s.line, "conv layer '" + s.name + "' needs filters");
        s.kernel = r.get_int(*t, "kernel", 3, 1, 64);
        s.stride = r.get_int(*t, "stride", 1, 1, 64);
        s.pad = r.get_int(*t, "pad", 0, 0, 64);
        s.groups = r.get_int(*t, "groups", 1, 1, 1 << 16);
        s.bias = r.get_bool(*t, "bias", true);
        break;
      case LayerKind::max_pool:
      case LayerKind::avg_pool:
        s.kernel = r.get_int(*t, "kernel", 2, 1, 64);
        s.stride = r.get_int(*t, "stride", s.kernel, 1, 64);
        s.pad = r.get_int(*t, "pad", 0, 0, 64);
        if (2 * s.pad > s.kernel) r.fail_line(s.line, "pool layer '" + s.name + "': pad must be at most half the kernel");
        break;
      case LayerKind::fc:
        if (const toml::node* u = t->get("units"); u && u->is_string()) {
          if (*u->value<std::string>() != "classes") r.fail_at(*u, "'units' must be a number or \"classes\"");
          s.units = kClassUnits;
        } else {
          s.units = r.get_int(*t, "units", 0, 1, 1 << 24);
          if (s.units == 0) r.fail_line(s.line, "fc layer '" + s.name + "' needs units");
        }
        s.bias = r.get_bool(*t, "bias", true);
        break;
      case LayerKind::dropout:
        s.p = float(r.get_num(*t, "p", 0.5, 0, 0.99));
        break;
      case LayerKind::batch_norm:
        s.eps = float(r.get_num(*t, "eps", 1e-5, 1e-12, 1));
        s.momentum = float(r.get_num(*t, "momentum", 0.1, 0, 1));
        break;
      default: break;
    }
    cfg.layers.push_back(s);
  }
  if (cfg.layers.back().kind != LayerKind::softmax_xent)
    r.fail_line(cfg.layers.back().line, "the last layer must be softmax_xent (the loss)");
  for (size_t i = 0; i + 1 < cfg.layers.size(); ++i)
    if (cfg.layers[i].kind == LayerKind::softmax_xent)
      r.fail_line(cfg.layers[i].line, "softmax_xent may only be the last layer");
  if (cfg.name.empty()) cfg.name = path;
  return cfg;
}

NetConfig read_net_config(const std::string& path) {
  if (!file_exists(path)) fail_file(path, "config file not found");
  return parse_net_config(read_whole_file(path), path);
}

}  // namespace convoy
