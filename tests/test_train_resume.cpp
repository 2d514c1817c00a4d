// Exact resume: a run stopped mid-epoch (or at an epoch's end) and resumed from its checkpoint
// ends with bit-identical weights, running statistics and optimiser state to an uninterrupted
// run, every epoch evaluated once; damaged checkpoints are refused; `train eval` reads what
// training wrote.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shared/atomic_file.h"
#include "shared/crc32c.h"
#include "shared/error.h"
#include "shared/mpi_context.h"
#include "train/checkpoint.h"
#include "train/synthetic_data.h"
#include "train/trainer.h"

using namespace convoy;

namespace {

convoy::MpiContext& mpi() {
  static convoy::MpiContext ctx(nullptr, nullptr);
  return ctx;
}

const std::string kTmp = std::string(CONVOY_TEST_TMP) + "/resume";

// Every kind of state a resume must restore: batch-norm running statistics, dropout masks,
// random crops and flips, the optimiser's buffers and the lr schedule.
std::string net_config(const std::string& optimizer, const std::string& schedule) {
  return "[train]\noptimizer = \"" + optimizer + "\"\nschedule = \"" + schedule +
         "\"\nlr = 0.01\nwarmup_epochs = 0.5\n[data]\npad = 1\ncrop = 8\nflip = true\n"
         "[[layer]]\ntype = \"conv\"\nfilters = 4\nkernel = 3\npad = 1\n"
         "[[layer]]\ntype = \"batch_norm\"\n[[layer]]\ntype = \"relu\"\n"
         "[[layer]]\ntype = \"max_pool\"\nkernel = 2\n[[layer]]\ntype = \"flatten\"\n"
         "[[layer]]\ntype = \"fc\"\nunits = 16\n[[layer]]\ntype = \"relu\"\n"
         "[[layer]]\ntype = \"dropout\"\np = 0.3\n[[layer]]\ntype = \"fc\"\nunits = \"classes\"\n"
         "[[layer]]\ntype = \"softmax_xent\"\n";
}

std::string make_data() {
  const std::string dir = kTmp + "/data";
  SyntheticSpec spec;
  spec.file_counts = {10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 7};
  spec.classes = 4;
  write_synthetic_dataset(dir, spec);
  return dir;
}

TrainOptions base(const std::string& config, const std::string& data, const std::string& ckpt) {
  TrainOptions o;
  o.config = config;
  o.data = data;
  o.val = data;
  o.epochs = 3;
  o.batch = 16;
  o.seed = 7;
  o.threads = 2;
  o.window_files = 3;
  o.readers = 2;
  o.log_every = 0;
  o.checkpoint = ckpt;
  return o;
}

// A fresh run's options: its checkpoint from an earlier test run is removed first, as a user starts
// over (train refuses to write over a checkpoint a run does not resume from).
TrainOptions fresh(const std::string& config, const std::string& data, const std::string& ckpt) {
  std::remove(ckpt.c_str());
  return base(config, data, ckpt);
}

// A fresh run of net_NAME.toml (SGD, constant lr) stopped after 2 steps; its checkpoint at path, as read.
Checkpoint stopped_after_two(const std::string& data, const std::string& name, const std::string& path) {
  const std::string config = kTmp + "/net_" + name + ".toml";
  write_file_atomic(config, net_config("sgd", "constant"));
  TrainOptions o = fresh(config, data, path);
  o.stop_after = 2;
  if (run_training(o, 0, 1) != 0) throw Error("the run to be resumed failed");
  return read_checkpoint(path);
}

// The metrics file's epoch records, in the order written.
std::vector<nlohmann::json> epoch_records(const std::string& jsonl) {
  std::vector<nlohmann::json> out;
  const std::string text = read_whole_file(jsonl);
  for (size_t at = 0, end; at < text.size(); at = end + 1) {
    end = text.find('\n', at);
    nlohmann::json j = nlohmann::json::parse(text.substr(at, end - at));
    if (j.at("kind") == "epoch") out.push_back(std::move(j));
  }
  return out;
}

// One record an epoch, in order, each with the uninterrupted run's figures (timings aside).
void expect_same_epochs(const std::vector<nlohmann::json>& want, const std::vector<nlohmann::json>& got) {
  ASSERT_EQ(got.size(), want.size()) << "epoch records: " << nlohmann::json(got).dump();
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("epoch record " + std::to_string(i + 1));
    for (const char* key : {"epoch", "global_step", "train_loss", "train_acc", "test_loss", "test_top1", "test_top5"})
      EXPECT_EQ(got[i].at(key), want[i].at(key)) << key;
  }
}

void expect_same_run(const Checkpoint& a, const Checkpoint& b) {
  EXPECT_EQ(a.info.at("global_step"), b.info.at("global_step"));
  EXPECT_EQ(a.info.at("opt_t"), b.info.at("opt_t"));
  ASSERT_EQ(a.weights.size(), b.weights.size());
  EXPECT_TRUE(a.weights == b.weights) << "weights differ";
  EXPECT_TRUE(a.state == b.state) << "running statistics differ";
  EXPECT_TRUE(a.m == b.m && a.v == b.v) << "optimiser state differs";
  EXPECT_TRUE(a.avg_weights == b.avg_weights && a.avg_state == b.avg_state) << "the weights' average differs";
}

}  // namespace

TEST(Resume, InterruptedAndResumedEqualsUninterrupted) {
  mpi();
  const std::string data = make_data();
  for (auto [optimizer, schedule] :
       {std::pair{"sgd", "onecycle"}, std::pair{"adamw", "cosine"}, std::pair{"lars", "cosine"}}) {
    SCOPED_TRACE(std::string(optimizer) + " " + schedule);
    const std::string config = kTmp + "/net_" + optimizer + ".toml";
    write_file_atomic(config, net_config(optimizer, schedule));
    const std::string full = kTmp + "/full.ckpt";
    ASSERT_EQ(run_training(fresh(config, data, full), 0, 1), 0);
    const Checkpoint a = read_checkpoint(full);
    EXPECT_EQ(a.info.at("global_step").get<long long>(), 3 * (117 / 16));

    // Stop mid-epoch (step 10 = epoch 2, step 3) and at an epoch's end (step 7).
    for (long long stop : {10LL, 7LL}) {
      const std::string part = kTmp + "/part.ckpt";
      TrainOptions first = fresh(config, data, part);
      first.stop_after = stop;
      ASSERT_EQ(run_training(first, 0, 1), 0);
      EXPECT_EQ(read_checkpoint(part).info.at("global_step").get<long long>(), stop);
      TrainOptions second = base("", data, part);
      second.resume = part;
      ASSERT_EQ(run_training(second, 0, 1), 0);
      expect_same_run(a, read_checkpoint(part));
    }

    // A different seed really does change the outcome (the comparison above can fail).
    TrainOptions other = fresh(config, data, kTmp + "/other.ckpt");
    other.seed = 8;
    ASSERT_EQ(run_training(other, 0, 1), 0);
    EXPECT_FALSE(read_checkpoint(kTmp + "/other.ckpt").weights == a.weights);
  }
}

// A run stopped by --stop-after at an epoch's last step makes that epoch's end before it stops: the
// evaluation, the epoch line and record, a checkpoint at the next epoch's start. Resumed, it goes on
// with the next epoch, and the two runs' metrics hold each epoch's record once, as the uninterrupted
// run's. At the last epoch's end the run is simply complete. The same with [train] ema (the average
// evaluated) and accumulate.
TEST(Resume, StopAtAnEpochsLastStepKeepsItsEvaluation) {
  mpi();
  const std::string data = make_data();
  for (const std::string& recipe : {std::string(), std::string("ema = 0.7\naccumulate = 2\n")}) {
    SCOPED_TRACE(recipe);
    const std::string config = kTmp + "/net_epoch_end.toml";
    std::string text = net_config("sgd", "onecycle");
    text.insert(text.find("[data]"), recipe);
    write_file_atomic(config, text);
    const std::string full = kTmp + "/full_epochs.ckpt", full_metrics = kTmp + "/full_epochs.jsonl";
    std::remove(full_metrics.c_str());
    TrainOptions whole = fresh(config, data, full);
    whole.metrics = full_metrics;
    ASSERT_EQ(run_training(whole, 0, 1), 0);
    const std::vector<nlohmann::json> want = epoch_records(full_metrics);
    ASSERT_EQ(want.size(), 3u);
    ASSERT_TRUE(want[0].contains("test_top1"));
    // 7 steps an epoch: the ends of the first, the second and the last epoch.
    for (long long stop : {7LL, 14LL, 21LL}) {
      SCOPED_TRACE(stop);
      const std::string part = kTmp + "/part_epochs.ckpt", metrics = kTmp + "/part_epochs.jsonl";
      std::remove(metrics.c_str());
      TrainOptions first = fresh(config, data, part);
      first.stop_after = stop;
      first.metrics = metrics;
      ASSERT_EQ(run_training(first, 0, 1), 0);
      EXPECT_EQ(epoch_records(metrics).size(), size_t(stop / 7)) << "the stopped run's last epoch has no record";
      const Checkpoint stopped = read_checkpoint(part);
      EXPECT_EQ(stopped.info.at("epoch").get<int>(), stop / 7);
      EXPECT_EQ(stopped.info.at("step").get<long long>(), 0);
      TrainOptions second = base("", data, part);
      second.resume = part;
      second.metrics = metrics;
      ASSERT_EQ(run_training(second, 0, 1), 0);
      expect_same_run(read_checkpoint(full), read_checkpoint(part));
      expect_same_epochs(want, epoch_records(metrics));
    }
  }
}

TEST(Resume, DamagedCheckpointIsRefused) {
  mpi();
  const std::string data = make_data();
  const std::string config = kTmp + "/net_damage.toml";
  write_file_atomic(config, net_config("sgd", "constant"));
  const std::string path = kTmp + "/damage.ckpt";
  TrainOptions o = fresh(config, data, path);
  o.stop_after = 2;
  ASSERT_EQ(run_training(o, 0, 1), 0);
  const std::string good = read_whole_file(path);
  for (size_t at : {size_t(3), good.size() / 2, good.size() - 1}) {
    std::string bad = good;
    bad[at] ^= 0x10;
    write_file_atomic(path, bad);
    try {
      read_checkpoint(path);
      ADD_FAILURE() << "a flipped byte at " << at << " was not detected";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind(path + ": ", 0), 0u) << e.what();
    }
  }
  write_file_atomic(path, good.substr(0, good.size() - 100));
  try {
    read_checkpoint(path);
    ADD_FAILURE() << "a truncated checkpoint was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("damaged"), std::string::npos) << e.what();
  }
  // Resuming from it fails before any training, with the same message.
  TrainOptions r = base("", data, kTmp + "/never.ckpt");
  r.resume = path;
  EXPECT_THROW(run_training(r, 0, 1), Error);
  EXPECT_FALSE(file_exists(kTmp + "/never.ckpt"));
}

// Sizes in the header whose sum or product wraps around to the file size (an array of 2^62 floats;
// metadata longer than the file, balanced by an array) are refused, not handed to resize or memcpy.
TEST(Resume, SizesThatWrapAreRefused) {
  const uint64_t cases[][5] = {{2, uint64_t(1) << 62, 0, 0, 0}, {~uint64_t(0) - 97, 0, 0, 0, 25}};
  for (const auto& sizes : cases) {
    std::string bytes = "CVYCKPT1";
    bytes.append(reinterpret_cast<const char*>(sizes), sizeof sizes);
    bytes += "{}";
    const uint32_t crc = crc32c(bytes.data(), bytes.size());
    bytes.append(reinterpret_cast<const char*>(&crc), 4);
    try {
      parse_checkpoint(bytes, "wrap.ckpt");
      ADD_FAILURE() << "sizes that wrap were accepted";
    } catch (const Error& e) {
      EXPECT_STREQ(e.what(), "wrap.ckpt: checkpoint sizes do not add up to the file size");
    }
  }
}

TEST(Resume, EvalReadsTheCheckpoint) {
  mpi();
  const std::string data = make_data();
  const std::string config = kTmp + "/net_eval.toml";
  write_file_atomic(config, net_config("sgd", "onecycle"));
  TrainOptions o = fresh(config, data, kTmp + "/eval.ckpt");
  o.epochs = 6;
  o.metrics = kTmp + "/eval.jsonl";
  ASSERT_EQ(run_training(o, 0, 1), 0);
  EvalOptions e;
  e.checkpoint = kTmp + "/eval.ckpt";
  e.data = data;
  e.batch = 32;
  EXPECT_EQ(run_eval(e, 0, 1), 0);
  // The synthetic classes are easy: the net must have learnt them well above chance (0.25).
  std::string jsonl = read_whole_file(o.metrics);
  const std::string last = jsonl.substr(jsonl.rfind('{'));
  EXPECT_GT(nlohmann::json::parse(last).at("test_top1").get<double>(), 0.6) << last;
}

// A resumed run without --checkpoint writes to the checkpoint it resumed from: at --stop-after
// (as on a signal) and at its end; nothing done after a resume is lost.
TEST(Resume, ResumedRunWritesTheCheckpointItResumedFrom) {
  mpi();
  const std::string data = make_data();
  const std::string config = kTmp + "/net_own.toml";
  write_file_atomic(config, net_config("sgd", "onecycle"));
  const std::string path = kTmp + "/own.ckpt";
  TrainOptions first = fresh(config, data, path);
  first.stop_after = 5;
  ASSERT_EQ(run_training(first, 0, 1), 0);
  TrainOptions again = base("", data, "");
  again.resume = path;
  again.stop_after = 9;
  ASSERT_EQ(run_training(again, 0, 1), 0);
  EXPECT_EQ(read_checkpoint(path).info.at("global_step").get<long long>(), 9);
  again.stop_after = 0;
  ASSERT_EQ(run_training(again, 0, 1), 0);
  EXPECT_EQ(read_checkpoint(path).info.at("global_step").get<long long>(), 3 * (117 / 16));
}

// A checkpoint records the device it trained on, resolved (`auto` here: the CPU). A resumed run with
// --device left out goes on there: one from a GPU stops on a machine without one, naming the flag
// that moves it, rather than going on on the CPU unasked; --device given moves it.
TEST(Resume, ResumedRunStaysOnItsDeviceUnlessMoved) {
  mpi();
  const std::string data = make_data(), path = kTmp + "/device.ckpt";
  Checkpoint c = stopped_after_two(data, "device", path);
  ASSERT_EQ(c.info.at("device"), "cpu");
  c.info["device"] = "cuda";  // as a GPU host wrote it
  write_checkpoint(path, c);
  TrainOptions r = base("", data, "");
  r.resume = path;
  r.stop_after = 4;
  try {
    run_training(r, 0, 1);
    ADD_FAILURE() << "a GPU run resumed on the CPU unasked";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the run trained on a GPU and this process sees none; --device cpu"),
              std::string::npos)
        << e.what();
  }
  r.backend.device = Device::cpu;
  r.backend_given = {"--device"};
  ASSERT_EQ(run_training(r, 0, 1), 0);
  const Checkpoint moved = read_checkpoint(path);
  EXPECT_EQ(moved.info.at("device"), "cpu");
  EXPECT_EQ(moved.info.at("global_step"), 4);
}

// A checkpoint of an older train (no record of the data it was trained on) is refused by a resume
// and by an evaluation, naming the checkpoint, rather than run with inputs nobody can check.
TEST(Resume, CheckpointWithoutARecordOfItsDataIsRefused) {
  mpi();
  const std::string data = make_data(), path = kTmp + "/old.ckpt";
  Checkpoint c = stopped_after_two(data, "old", path);
  for (const char* key : {"format", "window_files", "val"}) c.info.erase(key);
  c.info["data"] = data;  // as an older train wrote it: the folder's name alone
  write_checkpoint(path, c);
  TrainOptions r = base("", data, "");
  r.resume = path;
  EvalOptions e;
  e.checkpoint = path;
  e.data = data;
  for (int eval : {0, 1}) {
    try {
      eval ? run_eval(e, 0, 1) : run_training(r, 0, 1);
      ADD_FAILURE() << (eval ? "evaluated" : "resumed") << " a checkpoint without a record of its data";
    } catch (const Error& err) {
      EXPECT_EQ(std::string(err.what()).rfind(path + ": made by an older train", 0), 0u) << err.what();
    }
  }
  EXPECT_EQ(read_checkpoint(path).info.at("global_step").get<long long>(), 2);
}
