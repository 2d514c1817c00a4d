// The run's starting point, read before anything is built: a damaged checkpoint, a bad config or an
// input that differs from a checkpoint's record stops the run before any loader or device is set up.
#include "train/run_spec.h"

#include <unistd.h>

#include <filesystem>
#include <tuple>
#include <utility>

#include "input/augment.h"
#include "shared/atomic_file.h"
#include "shared/error.h"
#include "train/evaluation.h"

namespace convoy {
namespace {

// The version of the run record below; checkpoints without one came before the record existed.
constexpr int kRecordFormat = 2;

// "1 rank", "2 ranks".
std::string count_text(long long n, const std::string& what) {
  return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
}

// The validation set in `dir` ("": none), checked against the training data as an evaluation is.
std::optional<DataIdentity> val_of(const std::string& dir, const DataIdentity& trained) {
  if (dir.empty()) return std::nullopt;
  const DatasetMeta meta = read_dataset_meta(dir);
  if (!trained.dir.empty()) check_evaluable(meta, dir, trained);
  return identity_of(meta, dir);
}

RunSpec fresh_spec(const TrainOptions& o) {
  RunSpec s;
  s.cfg = read_net_config(o.config);
  if (o.epochs) s.cfg.train.epochs = *o.epochs;
  if (o.batch) s.cfg.train.batch = *o.batch;
  s.seed = o.seed.value_or(1);
  s.window_files = o.window_files.value_or(4);
  s.order = o.order.value_or(SampleOrder::local);
  s.data_dir = o.data;
  s.val_dir = o.val;
  if (!o.data.empty()) s.data = identity_of(read_dataset_meta(o.data), o.data);
  s.val = val_of(o.val, s.data);
  s.checkpoint = o.checkpoint;
  s.backend = o.backend;
  s.backend.grad_comm = grad_comm_for(o.backend.grad_comm, o.backend.precision, o.reach);
  if (!o.given("--bucket-mb")) s.backend.bucket_mb = default_bucket_mb(s.backend.grad_comm);
  return s;
}

// A setting the checkpoint fixed: given again, it must be the same.
template <typename T>
T kept(const char* flag, const std::optional<T>& given, T recorded, const char* what) {
  if (given && *given != recorded)
    fail(std::string(flag) + " " + std::to_string(*given) + " differs from the checkpoint's " +
         std::to_string(recorded) + "; a resumed run keeps its " + what);
  return recorded;
}

// The sample order is kept: the rest of an epoch in the other order would repeat some samples and
// skip others. A checkpoint of a train that knew no other order was saved in local order.
SampleOrder kept_order(const std::optional<SampleOrder>& given, const nlohmann::json& info, const std::string& ckpt) {
  const std::string name = info.value("order", std::string(order_name(SampleOrder::local)));
  const std::optional<SampleOrder> recorded = parse_order(name);
  if (!recorded) fail_file(ckpt, "checkpoint metadata: unknown sample order \"" + name + "\"");
  if (given && *given != *recorded)
    fail(std::string("--order ") + order_name(*given) + " differs from the checkpoint's " + name +
         "; a resumed run keeps its sample order");
  return *recorded;
}

// The global batch is kept on any number of ranks (each takes its share of it), so the steps of
// an epoch and the lr schedule stay as they were.
int kept_batch(const std::optional<int>& given, int recorded, int ranks) {
  if (given && *given != recorded)
    fail("--batch " + std::to_string(*given) + " differs from the checkpoint's " + std::to_string(recorded) +
         "; a resumed run keeps its global batch (on " + count_text(ranks, "rank") + ": " +
         (recorded % ranks == 0 ? std::to_string(recorded / ranks) + " per rank)" : "which do not divide it)"));
  return recorded;
}

// A checkpoint saved mid-epoch by an older train, whose epochs dealt whole files to ranks, would
// continue with other samples than its epoch had left.
void check_plan(const nlohmann::json& info, const std::string& ckpt) {
  if (info.contains("plan_ranks") || info.at("step").get<long long>() == 0) return;
  fail_file(ckpt,
            "saved mid-epoch by an older train, which planned its epochs otherwise; resume it with that "
            "train, or from a checkpoint at an epoch's end");
}

void check_config(const std::string& given, const Checkpoint& c, const std::string& ckpt) {
  if (given.empty()) return;
  if (read_net_config(given).text != c.info.at("config_text").get<std::string>())
    fail("--config " + given + " differs from the config " + ckpt + " was trained with (" +
         c.info.at("config_path").get<std::string>() + "); a resumed run keeps its config");
}

// --stop-after must lie ahead of where the checkpoint is, or the run would train a step past it.
void check_stop_after(long long stop_after, const nlohmann::json& info, const std::string& ckpt) {
  const long long at = info.at("global_step").get<long long>();
  if (stop_after > 0 && stop_after <= at)
    fail("--stop-after " + std::to_string(stop_after) + ": " + ckpt + " is already at step " + std::to_string(at));
}

// --epochs may extend a run, or end it sooner, but not before where the checkpoint already is.
int epochs_of(const std::optional<int>& given, const nlohmann::json& info, const std::string& ckpt) {
  if (!given) return info.at("epochs").get<int>();
  const int epoch = info.at("epoch").get<int>();
  const long long step = info.at("step").get<long long>();
  if (*given < epoch || (*given == epoch && step > 0))
    fail("--epochs " + std::to_string(*given) + ": " + ckpt + " has already trained " + count_text(epoch, "epoch") +
         " and " + count_text(step, "step") + "; --epochs may only extend a resumed run");
  return *given;
}

// The data at `given` (or, not given, where the checkpoint recorded it) must be the recorded one.
std::pair<std::string, DataIdentity> same_data(const std::string& flag, const std::string& given,
                                               const DataIdentity& recorded, const std::string& what) {
  const std::string dir = given.empty() ? recorded.dir : given;
  if (given.empty() && !file_exists(join_path(dir, kDatasetJson)))
    fail_file(dir,
              "the " + what + " is not here any more (no " + kDatasetJson + "); " + flag + " names where it is now");
  const DataIdentity now = identity_of(read_dataset_meta(dir), dir);
  const std::string d = difference(now, recorded);
  if (d.empty()) return {dir, now};
  if (given.empty()) fail_file(dir, "no longer the " + what + " (" + d + "); " + flag + " names where it is now");
  fail(flag + " " + given + ": not the " + what + " (" + d + ")");
}

// A choice the checkpoint recorded by name; a checkpoint of an older train, which recorded none,
// leaves `fallback` (the command line's).
template <typename E>
E recorded_choice(const nlohmann::json& info, const char* key, const Names<E>& names, E fallback,
                  const std::string& ckpt) {
  if (!info.contains(key)) return fallback;
  const std::string name = info.at(key).get<std::string>();
  for (const auto& [spelling, e] : names)
    if (spelling == name) return e;
  fail_file(ckpt, "checkpoint metadata: unknown " + std::string(key) + " \"" + name + "\"");
}

// A recorded choice, refused in one line where `flag` gave another one.
template <typename E>
E keep_choice(const nlohmann::json& info, const char* key, const Names<E>& names, E given, bool was_given,
              const std::string& ckpt, const char* flag) {
  const E kept = recorded_choice(info, key, names, given, ckpt);
  if (was_given && given != kept)
    fail(std::string(flag) + " " + name_of(names, given) + " differs from the checkpoint's " + name_of(names, kept) +
         "; a resumed run computes as it did");
  return kept;
}

// A recorded number, likewise.
template <typename T>
T keep_number(const nlohmann::json& info, const char* key, T given, bool was_given, const char* flag) {
  if (!info.contains(key)) return given;
  const T kept = info.at(key).get<T>();
  if (was_given && given != kept)
    fail(std::string(flag) + " " + nlohmann::json(given).dump() + " differs from the checkpoint's " +
         nlohmann::json(kept).dump() + "; a resumed run computes as it did");
  return kept;
}

// The arithmetic is kept: a resumed run in another precision, or with its gradients averaged in
// another one, would round otherwise from its first step on and end elsewhere than the
// uninterrupted run. --grad-comm auto given again takes the recorded choice, whatever the ranks'
// reach now: fp8 chosen across hosts stays fp8 on one.
void keep_arithmetic(const TrainOptions& o, const nlohmann::json& info, const std::string& ckpt, RunSpec& s) {
  const BackendOptions& b = o.backend;
  BackendOptions& k = s.backend;
  k = b;
  k.precision = keep_choice(info, "precision", precision_names(), b.precision, o.given("--precision"), ckpt,
                            "--precision");
  const GradComm given_g = grad_comm_for(b.grad_comm, k.precision, o.reach);
  k.grad_comm = recorded_choice(info, "grad_comm", grad_comm_names(), given_g, ckpt);
  if (o.given("--grad-comm") && b.grad_comm != GradComm::automatic && given_g != k.grad_comm)
    fail("--grad-comm " + name_of(grad_comm_names(), b.grad_comm) + " (" + name_of(grad_comm_names(), given_g) +
         ") differs from the checkpoint's " + name_of(grad_comm_names(), k.grad_comm) +
         "; a resumed run keeps its gradients' all-reduce");
  k.input_fold = keep_choice(info, "input_fold", input_fold_names(), b.input_fold, o.given("--input-fold"), ckpt,
                             "--input-fold");
  k.conv_algos = keep_choice(info, "cudnn_algos", conv_algos_names(), b.conv_algos, o.given("--cudnn-algos"), ckpt,
                             "--cudnn-algos");
  k.cudnn_workspace_mb = keep_number(info, "cudnn_workspace_mb", b.cudnn_workspace_mb, o.given("--cudnn-workspace"),
                                     "--cudnn-workspace");
  const double bucket_mb = o.given("--bucket-mb") ? b.bucket_mb : default_bucket_mb(k.grad_comm);
  k.bucket_mb = keep_number(info, "bucket_mb", bucket_mb, o.given("--bucket-mb"), "--bucket-mb");
  // --device given moves the run on purpose; left out, it stays where it trained.
  k.device = o.given("--device") ? b.device : recorded_choice(info, "device", device_names(), b.device, ckpt);
}

void resume_data(const TrainOptions& o, RunSpec& s) {
  const nlohmann::json& info = s.resume->info;
  std::tie(s.data_dir, s.data) = same_data("--data", o.data, trained_on(*s.resume, o.resume),
                                           "dataset " + o.resume + " was trained on");
  if (info.at("val").is_null()) {
    if (!o.val.empty())
      fail("--val " + o.val + ": " + o.resume + " was trained without --val; a resumed run keeps its validation set");
    return;
  }
  const DataIdentity recorded = data_identity_from_json(info.at("val"));
  std::tie(s.val_dir, s.val) = same_data("--val", o.val, recorded, "validation set " + o.resume + " was trained with");
  check_evaluable(read_dataset_meta(s.val_dir), s.val_dir, s.data);
}

// A run whose batch --batch auto chose keeps it and the lr scaled to it (the config's lr is not the
// run's); --batch auto on a resumed run never sweeps again, and is refused for a batch set by hand.
void keep_auto_batch(const TrainOptions& o, const nlohmann::json& info, RunSpec& s) {
  s.batch_auto = info.value("batch_auto", false);
  if (s.batch_auto) s.cfg.train.lr = info.at("lr").get<double>();
  if (o.batch_auto && !s.batch_auto)
    fail("--batch auto: " + o.resume + " was trained at a batch of " + std::to_string(s.cfg.train.batch) +
         " set by --batch or its config; a resumed run keeps its batch (leave --batch out)");
}

RunSpec resumed_spec(const TrainOptions& o, int ranks) {
  RunSpec s;
  s.resume = read_checkpoint(o.resume);
  s.cfg = config_of(*s.resume, o.resume);
  const nlohmann::json& info = s.resume->info;
  try {
    trained_on(*s.resume, o.resume);  // an older checkpoint is refused first
    check_config(o.config, *s.resume, o.resume);
    s.seed = kept("--seed", o.seed, info.at("seed").get<uint64_t>(), "seed");
    s.cfg.train.batch = kept_batch(o.batch, info.at("batch").get<int>(), ranks);
    keep_auto_batch(o, info, s);
    s.window_files = kept("--shuffle-files", o.window_files, info.at("window_files").get<int>(), "shuffle window");
    s.order = kept_order(o.order, info, o.resume);
    check_plan(info, o.resume);
    s.cfg.train.epochs = epochs_of(o.epochs, info, o.resume);
    check_stop_after(o.stop_after, info, o.resume);
    keep_arithmetic(o, info, o.resume, s);
    resume_data(o, s);
  } catch (const nlohmann::json::exception& e) {
    fail_file(o.resume, std::string("checkpoint metadata: ") + e.what());
  }
  s.checkpoint = o.checkpoint.empty() ? o.resume : o.checkpoint;
  return s;
}

// A checkpoint is written beside itself and renamed (atomic_file.h): its folder must exist and take
// new files, or the run would learn so only at its first save.
void check_writable_folder(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string dir = parent.empty() ? "." : parent.string();
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) fail_file(path, "cannot write the checkpoint: no folder " + dir);
  if (access(dir.c_str(), W_OK | X_OK) != 0)
    fail_file(path, "cannot write the checkpoint in " + dir + ": " + errno_text());
}

// A checkpoint already there holds a run of its own (most often this one's, started again without
// --resume after a crash): written over, that run would be lost.
void check_not_another_runs(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return;
  fail_file(path, "a checkpoint is already there: --resume " + path +
                      " continues the run it holds; to start over, remove it or name another --checkpoint");
}

}  // namespace

NetConfig config_of(const Checkpoint& c, const std::string& path) {
  try {
    return parse_net_config(c.info.at("config_text").get<std::string>(), c.info.at("config_path").get<std::string>());
  } catch (const nlohmann::json::exception& e) {
    fail_file(path, std::string("checkpoint metadata: ") + e.what());
  }
}

DataIdentity trained_on(const Checkpoint& c, const std::string& path) {
  try {
    if (c.info.value("format", 0) < kRecordFormat)
      fail_file(path,
                "made by an older train, which did not record the data it was trained on; it can be neither resumed "
                "nor evaluated with its inputs checked (train it again)");
    return data_identity_from_json(c.info.at("data"));
  } catch (const nlohmann::json::exception& e) {
    fail_file(path, std::string("checkpoint metadata: ") + e.what());
  }
}

RunSpec read_run_spec(const TrainOptions& o, int ranks) {
  RunSpec s = o.resume.empty() ? fresh_spec(o) : resumed_spec(o, ranks);
  const int batch = s.cfg.train.batch;
  // --batch auto on a fresh run chooses a batch per rank: any config batch will do.
  const bool chosen_later = o.batch_auto && !s.resume;
  // With [train] accumulate = k every rank trains k micro-batches of batch / (ranks x k) a step.
  const int k = s.cfg.train.accumulate;
  const long long parts = (long long)ranks * k;
  if (batch % parts != 0 && !chosen_later) {
    std::string split = "--batch " + std::to_string(batch) + " does not split over " + count_text(ranks, "rank");
    if (k > 1)
      split += " x " + std::to_string(k) + " micro-batches ([train] accumulate = " + std::to_string(k) + " in " +
               s.cfg.path + ")";
    if (!o.resume.empty())
      fail_file(o.resume, split + "; a resumed run keeps its global batch: resume on a number of ranks that divides " +
                              (k > 1 ? "batch / accumulate" : "it"));
    fail(split + "; give a multiple of " + std::to_string(parts));
  }
  if (!s.data_dir.empty()) check_declared_input(s.cfg, input_dims(s.data.shape, s.cfg.augment), s.data_dir);
  if (!s.checkpoint.empty()) check_writable_folder(s.checkpoint);
  if (!s.checkpoint.empty() && s.checkpoint != o.resume) check_not_another_runs(s.checkpoint);
  return s;
}

nlohmann::json run_record(const RunSpec& s, int ranks) {
  return {{"format", kRecordFormat},
          {"config_text", s.cfg.text},
          {"config_path", s.cfg.path},
          {"seed", s.seed},
          {"batch", s.cfg.train.batch},
          {"batch_auto", s.batch_auto},
          {"lr", s.cfg.train.lr},
          {"epochs", s.cfg.train.epochs},
          {"ranks", ranks},
          {"window_files", s.window_files},
          {"order", order_name(s.order)},
          {"precision", name_of(precision_names(), s.backend.precision)},
          {"grad_comm", name_of(grad_comm_names(), s.backend.grad_comm)},
          {"input_fold", name_of(input_fold_names(), s.backend.input_fold)},
          {"cudnn_algos", name_of(conv_algos_names(), s.backend.conv_algos)},
          {"cudnn_workspace_mb", s.backend.cudnn_workspace_mb},
          {"bucket_mb", s.backend.bucket_mb},
          {"device", name_of(device_names(), s.backend.device)},
          {"data", to_json(s.data)},
          {"val", s.val ? to_json(*s.val) : nlohmann::json()}};
}

BackendOptions backend_for(const BackendOptions& given, const RunSpec& s) {
  BackendOptions b = s.backend;
  b.cuda_graph = given.cuda_graph;
  b.bucket_updates = given.bucket_updates;
  return b;
}

Dims input_dims(const ImageShape& shape, const AugmentSpec& a) {
  require_crop_for(shape, a);
  return {int(shape.channels), a.crop ? a.crop : int(shape.height), a.crop ? a.crop : int(shape.width)};
}

void check_declared_input(const NetConfig& cfg, const Dims& in, const std::string& dir) {
  if (cfg.input_c <= 0 || (cfg.input_c == in.c && cfg.input_h == in.h && cfg.input_w == in.w)) return;
  auto text = [](int c, int h, int w) { return std::to_string(c) + "x" + std::to_string(h) + "x" + std::to_string(w); };
  fail_file(cfg.path, "[net] input = [" + std::to_string(cfg.input_c) + ", " + std::to_string(cfg.input_h) + ", " +
                          std::to_string(cfg.input_w) + "] but " + dir + "'s samples are " + text(in.c, in.h, in.w) +
                          (cfg.augment.crop ? " after [data] crop" : "") +
                          "; make [net] input say what the net is given, or leave it out");
}

void check_progressive_sizes(const Net& net, const ProgressiveResize& p) {
  if (!p.on()) return;
  const Dims built = net.built_input();
  for (int side : resolutions(p)) {
    try {
      net.nodes_at({built.c, side, side});
    } catch (const Error& e) {
      fail(std::string(e.what()) + " ([data] progressive trains at " + std::to_string(side) + "x" +
           std::to_string(side) + ")");
    }
  }
}

Net net_for_data(const NetConfig& cfg, const ImageShape& shape, size_t classes, const std::string& dir) {
  Net net(cfg, input_dims(shape, cfg.augment), int(classes));
  if (size_t(net.classes()) != classes)
    fail_file(join_path(dir, kDatasetJson), "has " + std::to_string(classes) +
                                                " classes but the net's last fc layer has " +
                                                std::to_string(net.classes()) + " outputs");
  check_progressive_sizes(net, cfg.augment.progressive);
  return net;
}

}  // namespace convoy
