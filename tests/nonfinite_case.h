// What the non-finite-loss tests share (test_train_nonfinite on the CPU backend, gpu_test_faults
// on the CUDA one): small nets whose loss overflows to NaN within a few steps of plain SGD at
// lr 1000 (fc layers in a row: each update scales the others' gradients, so the logits grow
// without bound), `train synth` data for them, and the checks that a run stops at the first such
// step, or skips it with --skip-nonfinite.
#pragma once
#include <gtest/gtest.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shared/atomic_file.h"
#include "train/checkpoint.h"
#include "train_cli.h"

namespace convoy::test {

// A GPU test's scratch folder, $TMPDIR (or /tmp)/<suite>/<name>, made: away from the build tree,
// which a GPU host does not have.
inline std::string scratch_dir(const std::string& suite, const std::string& name) {
  const char* env = std::getenv("TMPDIR");
  const std::string dir = std::string(env ? env : "/tmp") + "/" + suite + "/" + name;
  make_dirs(dir);
  return dir;
}

// Three fc layers: NaN (inf - inf in the softmax) at step 4 on the CPU backend.
inline const char* kOverflowFc = R"(
[train]
lr = 1000
momentum = 0
weight_decay = 0
schedule = "constant"
[[layer]]
type = "flatten"
[[layer]]
type = "fc"
units = 16
[[layer]]
type = "fc"
units = 16
[[layer]]
type = "fc"
units = "classes"
[[layer]]
type = "softmax_xent"
)";

// A convolution and batch norm before them, so that a skipped step's running statistics show.
inline const char* kOverflowBn = R"(
[train]
lr = 1000
momentum = 0
weight_decay = 0
schedule = "constant"
[[layer]]
type = "conv"
filters = 4
kernel = 3
pad = 1
[[layer]]
type = "batch_norm"
[[layer]]
type = "flatten"
[[layer]]
type = "fc"
units = 16
[[layer]]
type = "fc"
units = 16
[[layer]]
type = "fc"
units = "classes"
[[layer]]
type = "softmax_xent"
)";

// 80 samples: with --batch 8 and --epochs 2, 20 steps.
constexpr long long kOverflowSteps = 20;

// <dir>/fc.toml, <dir>/bn.toml and <dir>/data (4 files of 20 8x8 samples).
inline void prepare_overflow(const std::string& dir) {
  make_dirs(dir);  // first: kTrain may be a path through <build>/tests/tmp
  ASSERT_TRUE(file_exists(kTrain)) << kTrain;
  write_file_atomic(dir + "/fc.toml", kOverflowFc);
  write_file_atomic(dir + "/bn.toml", kOverflowBn);
  if (!file_exists(dir + "/data/dataset.json"))
    ASSERT_EQ(run(kTrain + " synth --out " + dir + "/data --files 4 --per-file 20 --size 8 --classes 4"), 0);
}

struct Outcome {
  int rc = 0;
  std::string err;  // what the run wrote to stderr
};

// Runs `train <args>`, its stderr kept in <dir>/<name>.err.
inline Outcome train_run(const std::string& dir, const std::string& name, const std::string& args,
                         const std::string& launch = "") {
  const std::string err = dir + "/" + name + ".err";
  Outcome o;
  o.rc = run(launch + kTrain + " " + args + " 2> " + err);
  o.err = file_exists(err) ? read_whole_file(err) : "";
  return o;
}

inline std::vector<std::string> lines_containing(const std::string& text, const std::string& needle) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.find(needle) != std::string::npos) out.push_back(line);
  return out;
}

// N of "error: step N (epoch E): the loss is ...", or -1.
inline long long nonfinite_step(const std::string& err) {
  const std::string key = "error: step ";
  const size_t at = err.find(key);
  return at == std::string::npos ? -1 : std::stoll(err.substr(at + key.size()));
}

// skipped_steps summed over the epoch records of a metrics file.
inline long long skipped_steps(const std::string& metrics) {
  long long n = 0;
  std::istringstream in(read_whole_file(metrics));
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.at("kind") == "epoch") n += j.at("skipped_steps").get<long long>();
  }
  return n;
}

// On the backend `flags` pick, with net <dir>/<net>.toml: the run stops at step N, within a few
// steps, with exactly one error line naming it and no epoch line; its last checkpoint (one per step)
// is byte for byte what a run stopped after step N - 1 writes; a run that checkpoints only at the
// end and logs nothing names the same step. With --skip-nonfinite the run completes, counts every
// step from N on as skipped (the weights stay those of step N - 1, whose logits overflow on every
// batch), and ends with the weights, optimiser state and running statistics of step N - 1, and
// the optimiser's step count of a whole run. Returns N (-1 when it did not stop).
inline long long check_nonfinite(const std::string& dir, const std::string& net, const std::string& flags,
                                 const std::string& tag) {
  const std::string common = "--config " + dir + "/" + net + ".toml --data " + dir +
                             "/data --epochs 2 --batch 8 --threads 1 --seed 3 " + flags;
  const std::string ckpt = dir + "/" + tag + "-stop.ckpt", ref = dir + "/" + tag + "-ref.ckpt";
  const std::string skip_ckpt = dir + "/" + tag + "-skip.ckpt", metrics = dir + "/" + tag + "-skip.jsonl";
  for (const std::string& f : {ckpt, ref, skip_ckpt, metrics}) std::remove(f.c_str());

  const Outcome stop = train_run(dir, tag + "-stop",
                                 common + " --log-every 1 --checkpoint-every 1 --checkpoint " + ckpt);
  EXPECT_NE(stop.rc, 0) << stop.err;
  const std::vector<std::string> errors = lines_containing(stop.err, "error");
  EXPECT_EQ(errors.size(), 1u) << stop.err;
  const long long n = nonfinite_step(stop.err);
  EXPECT_GE(n, 2) << stop.err;
  EXPECT_LE(n, 10) << stop.err;
  EXPECT_NE(stop.err.find("(epoch 1): the loss is "), std::string::npos) << stop.err;
  EXPECT_NE(stop.err.find("--skip-nonfinite"), std::string::npos) << stop.err;
  EXPECT_EQ(stop.err.find("epoch 1/2:"), std::string::npos) << stop.err;
  if (n < 2) return n;

  const Outcome quiet = train_run(dir, tag + "-quiet",
                                  common + " --log-every 0 --checkpoint " + dir + "/" + tag + "-q.ckpt");
  EXPECT_NE(quiet.rc, 0);
  EXPECT_EQ(nonfinite_step(quiet.err), n) << quiet.err;
  EXPECT_FALSE(file_exists(dir + "/" + tag + "-q.ckpt"));

  EXPECT_EQ(train_run(dir, tag + "-ref",
                      common + " --log-every 0 --stop-after " + std::to_string(n - 1) + " --checkpoint " + ref)
                .rc,
            0);
  EXPECT_TRUE(file_exists(ckpt));
  if (!file_exists(ckpt) || !file_exists(ref)) return n;
  EXPECT_TRUE(read_whole_file(ckpt) == read_whole_file(ref)) << "the last checkpoint is not that of step " << n - 1;

  const Outcome skip = train_run(dir, tag + "-skip",
                                 common + " --log-every 1 --skip-nonfinite --checkpoint " + skip_ckpt + " --metrics " +
                                     metrics);
  EXPECT_EQ(skip.rc, 0) << skip.err;
  if (skip.rc != 0) return n;
  EXPECT_EQ(skipped_steps(metrics), kOverflowSteps - (n - 1));
  EXPECT_EQ(lines_containing(skip.err, "steps skipped (loss not finite)").size(), 2u) << skip.err;
  const Checkpoint last = read_checkpoint(ref), end = read_checkpoint(skip_ckpt);
  EXPECT_EQ(end.info.at("global_step").get<long long>(), kOverflowSteps);
  EXPECT_EQ(end.info.at("opt_t").get<long long>(), kOverflowSteps);
  EXPECT_TRUE(end.weights == last.weights) << "a skipped step changed the weights";
  EXPECT_TRUE(end.m == last.m) << "a skipped step changed the optimiser state";
  EXPECT_TRUE(end.state == last.state) << "a skipped step changed the running statistics";
  return n;
}

}  // namespace convoy::test
