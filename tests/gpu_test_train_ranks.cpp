// The CUDA backend through mpirun and the real binary: with the same global batches (--order global),
// 2 GPUs (one rank each, gradients all-reduced by NCCL in buckets during the backward pass) end with the
// weights of 1 GPU after 20 steps in fp32 mode, and both follow the CPU backend (needs 2 GPUs; in
// bf16 mode the 2-GPU graph replays the op-by-op run exactly, and 1 and 2 GPUs agree to bf16's
// precision); on one GPU, a run stopped at step 10
// and resumed ends bit for bit where an uninterrupted run does, in fp32 and in bf16 (whose bf16
// weight copy is rebuilt from the checkpoint's fp32 weights). The epoch record counts the bytes
// each step puts on the wire: bf16 gradients by default with bf16 math, fp32 with --grad-comm fp32,
// fp8 by default between hosts (NCCL_HOSTID) on GPUs that sum it, and a resume on one host keeps it.
// On 2 GPUs with batch norm, a run stopped mid-epoch and resumed evaluates as the uninterrupted one.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shared/atomic_file.h"
#include "train/checkpoint.h"
#include "train/gpu_info.h"
#include "train/step.h"
#include "train/synthetic_data.h"
#include "train_cli.h"

using namespace convoy;
using namespace convoy::test;

namespace {

// The small net and 288 synthetic samples in two-sample files, made once per test binary run.
std::string prepare() {
  const char* tmp_env = std::getenv("TMPDIR");
  const std::string tmp = std::string(tmp_env ? tmp_env : "/tmp") + "/convoy_gpu_ranks";
  if (file_exists(tmp + "/data/dataset.json")) return tmp;
  make_dirs(tmp);
  write_file_atomic(tmp + "/net.toml", kConfig);
  SyntheticSpec spec;
  spec.file_counts.assign(144, 2);
  spec.classes = 4;
  write_synthetic_dataset(tmp + "/data", spec);
  return tmp;
}

// A checkpoint path with no file under it: the folder outlives a test run, and train writes over no
// checkpoint that it does not resume from.
std::string fresh(const std::string& path) {
  std::remove(path.c_str());
  return path;
}

}  // namespace

TEST(GpuTrain, ResumeOnOneGpuIsExact) {
  const std::string tmp = prepare();
  const std::string common = " --config " + tmp + "/net.toml --data " + tmp + "/data --batch 12 --epochs 1" +
                             " --threads 1 --log-every 0 --seed 5 --device cuda";
  ASSERT_EQ(run(kTrain + common + " --stop-after 20 --checkpoint " + fresh(tmp + "/whole.ckpt")), 0);
  ASSERT_EQ(run(kTrain + common + " --stop-after 10 --checkpoint " + fresh(tmp + "/part.ckpt")), 0);
  ASSERT_EQ(run(kTrain + common + " --stop-after 20 --resume " + tmp + "/part.ckpt --checkpoint " +
                fresh(tmp + "/resumed.ckpt")),
            0);
  const Checkpoint whole = read_checkpoint(tmp + "/whole.ckpt"), resumed = read_checkpoint(tmp + "/resumed.ckpt");
  EXPECT_EQ(resumed.info.at("global_step").get<long long>(), 20);
  EXPECT_EQ(whole.weights, resumed.weights);
  EXPECT_EQ(whole.m, resumed.m);
  EXPECT_EQ(whole.state, resumed.state);
}

TEST(GpuTrain, ResumeOnOneGpuIsExactBf16) {
  const std::string tmp = prepare();
  const std::string common = " --config " + tmp + "/net.toml --data " + tmp + "/data --batch 12 --epochs 1" +
                             " --threads 1 --log-every 0 --seed 5 --device cuda --precision bf16";
  ASSERT_EQ(run(kTrain + common + " --stop-after 20 --checkpoint " + fresh(tmp + "/whole16.ckpt")), 0);
  ASSERT_EQ(run(kTrain + common + " --stop-after 10 --checkpoint " + fresh(tmp + "/part16.ckpt")), 0);
  ASSERT_EQ(run(kTrain + common + " --stop-after 20 --resume " + tmp + "/part16.ckpt --checkpoint " +
                fresh(tmp + "/resumed16.ckpt")),
            0);
  const Checkpoint whole = read_checkpoint(tmp + "/whole16.ckpt"), resumed = read_checkpoint(tmp + "/resumed16.ckpt");
  EXPECT_EQ(resumed.info.at("global_step").get<long long>(), 20);
  EXPECT_EQ(whole.weights, resumed.weights);
  EXPECT_EQ(whole.m, resumed.m);
  EXPECT_EQ(whole.state, resumed.state);
}

TEST(GpuDataParallel, TwoGpusAgreeWithOneAndWithTheCpu) {
  if (gpu_count() < 2) GTEST_SKIP() << "needs 2 GPUs, " << gpu_count() << " present";
  const std::string tmp = prepare();
  const std::string common = " --config " + tmp + "/net.toml --data " + tmp + "/data --batch 12 --epochs 1" +
                             " --stop-after 20 --shuffle-files 1 --order global --threads 1 --log-every 0 --seed 3";
  auto train = [&](const std::string& launch, const std::string& flags, const std::string& name) {
    const std::string ckpt = tmp + "/" + name + ".ckpt";
    EXPECT_EQ(run(launch + kTrain + common + flags + " --checkpoint " + fresh(ckpt)), 0) << name;
    return read_checkpoint(ckpt);
  };
  const Checkpoint cpu = train("", " --device cpu", "cpu");
  const Checkpoint one = train("", " --device cuda --precision fp32", "gpu1");
  const Checkpoint two = train("mpirun -np 2 ", " --device cuda --precision fp32", "gpu2");
  const Checkpoint eager = train("mpirun -np 2 ", " --device cuda --precision fp32 --no-cuda-graph", "gpu2eager");
  EXPECT_EQ(two.info.at("ranks").get<int>(), 2);
  EXPECT_EQ(two.info.at("global_step").get<long long>(), 20);
  EXPECT_LT(max_diff(one.weights, two.weights), 1e-4);
  EXPECT_LT(max_diff(one.m, two.m), 1e-4);
  EXPECT_EQ(two.weights, eager.weights);  // the graph replays the op-by-op step exactly
  EXPECT_LT(max_diff(cpu.weights, one.weights), 1e-4);
}

TEST(GpuDataParallel, TwoGpusBf16GraphReplaysTheOpByOpRun) {
  if (gpu_count() < 2) GTEST_SKIP() << "needs 2 GPUs, " << gpu_count() << " present";
  const std::string tmp = prepare();
  const std::string common = " --config " + tmp + "/net.toml --data " + tmp + "/data --batch 12 --epochs 1" +
                             " --stop-after 20 --shuffle-files 1 --order global --threads 1 --log-every 0 --seed 3" +
                             " --device cuda --precision bf16";
  auto train = [&](const std::string& flags, const std::string& name) {
    const std::string ckpt = tmp + "/" + name + ".ckpt";
    EXPECT_EQ(run("mpirun -np 2 " + kTrain + common + flags + " --checkpoint " + fresh(ckpt)), 0) << name;
    return read_checkpoint(ckpt);
  };
  const Checkpoint graph = train("", "gpu2bf16"), eager = train(" --no-cuda-graph", "gpu2bf16eager");
  EXPECT_EQ(graph.info.at("ranks").get<int>(), 2);
  EXPECT_EQ(graph.weights, eager.weights);
  EXPECT_EQ(graph.m, eager.m);
  // One GPU with the same global batch: the same training up to bf16 rounding (activations are
  // rounded per sample either way; the sums over the batch and the convolution algorithms for 6
  // and 12 samples differ), so the weights after 20 steps agree to within bf16's precision.
  const std::string ckpt = tmp + "/gpu1bf16.ckpt";
  EXPECT_EQ(run(kTrain + common + " --checkpoint " + fresh(ckpt)), 0);
  const Checkpoint one = read_checkpoint(ckpt);
  EXPECT_EQ(one.info.at("ranks").get<int>(), 1);
  double diff = 0, norm = 0;
  for (size_t i = 0; i < one.weights.size(); ++i) {
    diff += double(one.weights[i] - graph.weights[i]) * (one.weights[i] - graph.weights[i]);
    norm += double(one.weights[i]) * one.weights[i];
  }
  ASSERT_EQ(one.weights.size(), graph.weights.size());
  EXPECT_LT(std::sqrt(diff / norm), 1e-2) << "1 GPU and 2 GPUs in bf16, relative L2 difference of the weights";
  EXPECT_GT(diff, 0.0);  // not the same run twice: the ranks did split the batch
}

namespace {

// The last epoch record of a metrics file.
nlohmann::json last_epoch_record(const std::string& path) {
  nlohmann::json last;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.at("kind") == "epoch") last = j;
  }
  return last;
}

}  // namespace

// Two ranks send every gradient once a step (a ring all-reduce over 2 ranks sends each byte once),
// and the 4-byte verdict on the loss: 2 bytes a gradient in bf16 (--precision bf16's default), 4 with
// --grad-comm fp32; one rank sends nothing. The exposed all-reduce time is the record's t_comm_exposed.
TEST(GpuDataParallel, EpochRecordCountsTheBytesOnTheWire) {
  if (gpu_count() < 2) GTEST_SKIP() << "needs 2 GPUs, " << gpu_count() << " present";
  const std::string tmp = prepare();
  const std::string common = " --config " + tmp + "/net.toml --data " + tmp + "/data --batch 12 --epochs 1" +
                             " --threads 1 --log-every 0 --seed 3 --device cuda --precision bf16";
  auto record = [&](const std::string& launch, const std::string& flags, const std::string& name) {
    const std::string metrics = tmp + "/" + name + ".jsonl";
    std::remove(metrics.c_str());
    EXPECT_EQ(run(launch + kTrain + common + flags + " --metrics " + metrics + " --checkpoint " +
                  fresh(tmp + "/" + name + ".ckpt")),
              0)
        << name;
    return last_epoch_record(metrics);
  };
  const nlohmann::json half = record("mpirun -np 2 ", "", "wire-bf16");
  const nlohmann::json full = record("mpirun -np 2 ", " --grad-comm fp32 --bucket-mb 0.5 --no-bucket-updates",
                                     "wire-fp32");
  const nlohmann::json one = record("", "", "wire-one");
  const double params = double(read_checkpoint(tmp + "/wire-bf16.ckpt").weights.size());
  ASSERT_GT(params, 1000.0);
  EXPECT_EQ(half.at("comm_bytes_per_step").get<double>(), 2 * params + 4);
  EXPECT_EQ(full.at("comm_bytes_per_step").get<double>(), 4 * params + 4);
  EXPECT_EQ(one.at("comm_bytes_per_step").get<double>(), 0.0);
  for (const nlohmann::json* j : {&half, &full, &one}) {
    EXPECT_GE(j->at("t_comm_exposed").get<double>(), 0.0);
    EXPECT_FALSE(j->contains("t_comm"));
  }
}

namespace {

// The metrics file's comm_plan record.
nlohmann::json plan_record(const std::string& path) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (const auto j = nlohmann::json::parse(line); j.at("kind") == "comm_plan") return j;
  return {};
}

}  // namespace

// --grad-comm auto between hosts (2 ranks that NCCL tells apart by NCCL_HOSTID, and joins through
// its sockets as it would two machines): fp8 where the GPUs sum it, a byte a gradient plus the
// buckets' scales and the loss verdict; else bf16. With fp8 the checkpoint holds each bucket's
// largest gradient, which the next step scales by, and the epoch records count the clipped buckets.
// A resume on one host keeps the checkpoint's choice.
TEST(GpuDataParallel, AutoSendsFp8BetweenHostsAndAResumeOnOneKeepsIt) {
  if (gpu_count() < 2) GTEST_SKIP() << "needs 2 GPUs, " << gpu_count() << " present";
  const std::string tmp = prepare();
  const std::string ckpt = fresh(tmp + "/hosts.ckpt"), m = tmp + "/hosts.jsonl", resumed = tmp + "/hosts-r.jsonl";
  std::remove(m.c_str());
  std::remove(resumed.c_str());
  const std::string rank = kTrain + " --config " + tmp + "/net.toml --data " + tmp +
                           "/data --batch 12 --epochs 1 --threads 1 --log-every 0 --seed 3 --device cuda --precision "
                           "bf16 --metrics " +
                           m + " --checkpoint " + ckpt;
  const std::string sockets = " -x NCCL_IB_DISABLE=1 -x NCCL_NET=Socket -x NCCL_SOCKET_IFNAME=lo -x NCCL_HOSTID=";
  ASSERT_EQ(run("mpirun -np 1" + sockets + "a " + rank + " : -np 1" + sockets + "b " + rank), 0);
  const bool fp8 = fp8_wire_supported(Device::cuda, 0);
  const nlohmann::json plan = plan_record(m);
  ASSERT_FALSE(plan.is_null()) << m;
  EXPECT_EQ(plan.at("hosts"), 2);
  EXPECT_EQ(plan.at("grad_comm"), fp8 ? "fp8" : "bf16");
  const double params = plan.at("params").get<double>(), buckets = double(plan.at("bucket_bytes").size());
  EXPECT_EQ(last_epoch_record(m).at("comm_bytes_per_step").get<double>(),
            fp8 ? params + 4 * buckets + 4 : 2 * params + 4);
  const nlohmann::json info = read_checkpoint(ckpt).info;
  EXPECT_EQ(info.at("grad_comm"), fp8 ? "fp8" : "bf16");
  EXPECT_EQ(info.contains("fp8_maxima"), fp8);
  EXPECT_EQ(last_epoch_record(m).contains("fp8_clipped_buckets"), fp8);
  if (fp8) EXPECT_EQ(info.at("fp8_maxima").size(), plan.at("bucket_bytes").size());

  ASSERT_EQ(run("mpirun -np 2 " + kTrain + " --resume " + ckpt + " --epochs 2 --log-every 0 --metrics " + resumed), 0);
  const nlohmann::json again = plan_record(resumed);
  ASSERT_FALSE(again.is_null()) << resumed;
  EXPECT_EQ(again.at("hosts"), 1);
  EXPECT_EQ(again.at("grad_comm"), plan.at("grad_comm"));
  EXPECT_EQ(last_epoch_record(resumed).contains("fp8_clipped_buckets"), fp8);
}

namespace {

// kConfig's net with batch norm after its convolution: running statistics that each rank updates
// from its own share of every batch.
std::string bn_config() {
  std::string c = kConfig;
  const std::string conv_end = "pad = 1\n[[layer]]\ntype = \"relu\"";
  const size_t at = c.find(conv_end);
  if (at == std::string::npos) return "";
  return c.insert(at + std::string("pad = 1\n").size(), "[[layer]]\ntype = \"batch_norm\"\n");
}

std::vector<nlohmann::json> epoch_records(const std::string& path) {
  std::vector<nlohmann::json> epochs;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.at("kind") == "epoch") epochs.push_back(j);
  }
  return epochs;
}

}  // namespace

// On 2 GPUs every rank evaluates, and the checkpoint holds, rank 0's running statistics
// (Step::sync_state, an NCCL broadcast): a run stopped mid-epoch and resumed on 2 GPUs reports each
// epoch's evaluation as the uninterrupted run does, and ends with its checkpoint.
TEST(GpuDataParallel, TwoGpusResumedRunEvaluatesAsTheUninterrupted) {
  if (gpu_count() < 2) GTEST_SKIP() << "needs 2 GPUs, " << gpu_count() << " present";
  const std::string tmp = prepare();
  const std::string config = bn_config();
  ASSERT_FALSE(config.empty()) << "kConfig no longer has the convolution bn_config expects";
  write_file_atomic(tmp + "/bn.toml", config);
  const std::string common = " --config " + tmp + "/bn.toml --data " + tmp + "/data --val " + tmp +
                             "/data --batch 12 --epochs 2 --threads 1 --log-every 0 --seed 3 --device cuda" +
                             " --precision fp32";
  auto train = [&](const std::string& flags, const std::string& name) {
    EXPECT_EQ(run("mpirun -np 2 " + kTrain + common + flags + " --metrics " + tmp + "/" + name + ".jsonl"), 0) << name;
  };
  for (const char* name : {"bn-whole", "bn-part"}) std::remove((tmp + "/" + name + ".jsonl").c_str());
  train(" --checkpoint " + fresh(tmp + "/bn-whole.ckpt"), "bn-whole");
  train(" --stop-after 10 --checkpoint " + fresh(tmp + "/bn-part.ckpt"), "bn-part");
  EXPECT_EQ(run("mpirun -np 2 " + kTrain + " --resume " + tmp + "/bn-part.ckpt --threads 1 --log-every 0 --metrics " +
                tmp + "/bn-part.jsonl"),
            0);
  const std::vector<nlohmann::json> whole = epoch_records(tmp + "/bn-whole.jsonl"),
                                    part = epoch_records(tmp + "/bn-part.jsonl");
  ASSERT_EQ(whole.size(), 2u);
  ASSERT_EQ(part.size(), 2u);
  for (size_t e = 0; e < whole.size(); ++e)
    for (const char* key : {"train_loss", "test_loss", "test_top1", "test_top5"})
      EXPECT_EQ(whole[e].at(key), part[e].at(key)) << "epoch " << e + 1 << " " << key;
  const Checkpoint a = read_checkpoint(tmp + "/bn-whole.ckpt"), b = read_checkpoint(tmp + "/bn-part.ckpt");
  EXPECT_EQ(a.weights, b.weights);
  EXPECT_EQ(a.state, b.state);
}
