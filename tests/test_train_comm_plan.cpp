// The metrics file's comm_plan record and the buckets' ready shares (train/comm_plan.h) that the
// iteration-time model reads: hand-made nodes, the shipped ResNet-50, and train's record and profile.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "shared/atomic_file.h"
#include "source_dir.h"
#include "train/checkpoint.h"
#include "train/comm_plan.h"
#include "train/net_config.h"
#include "train/synthetic_data.h"
#include "train_cli.h"

using namespace convoy;

namespace {

Node with_params(size_t lo, size_t count) {
  Node nd;
  nd.w_off = lo;
  nd.w_count = count;
  return nd;
}

std::vector<nlohmann::json> records(const std::string& path, const std::string& kind) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (const auto j = nlohmann::json::parse(line); j.at("kind") == kind) out.push_back(j);
  return out;
}

// A folder under the test's tmp with the small test net (net.toml) and 4 synthetic files of 6
// samples in 4 classes (data/), for runs of train.
std::string small_run_dir(const std::string& name) {
  const std::string tmp = std::string(CONVOY_TEST_TMP) + "/" + name;
  make_dirs(tmp);
  write_file_atomic(tmp + "/net.toml", test::kConfig);
  SyntheticSpec spec;
  spec.file_counts.assign(4, 6);
  spec.classes = 4;
  write_synthetic_dataset(tmp + "/data", spec);
  return tmp;
}

}  // namespace

// Nodes 0 ([0, 10)), 1 (none) and 2 ([10, 30)) cost 1, 2 and 3; the backward pass runs 2, 1, 0.
TEST(CommPlan, ReadySharesSumTheCostsUpToTheNodeThatCompletesTheBucket) {
  const std::vector<Node> nodes = {with_params(0, 10), Node{}, with_params(10, 20)};
  const std::vector<double> cost = {1, 2, 3};
  const std::vector<double> two = bucket_ready_fractions(nodes, {{10, 30}, {0, 10}}, cost);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_DOUBLE_EQ(two[0], 3.0 / 6);
  EXPECT_DOUBLE_EQ(two[1], 1.0);
  EXPECT_EQ(bucket_ready_fractions(nodes, {{0, 30}}, cost), std::vector<double>{1.0});
  // No cost measured (no profile): every bucket at the end.
  EXPECT_EQ(bucket_ready_fractions(nodes, {{10, 30}, {0, 10}}, {0, 0, 0}), (std::vector<double>{1.0, 1.0}));
}

TEST(CommPlan, TheCudaBackendsBucketsAndTheCpuBackendsOneAllReduce) {
  const NetConfig c = read_net_config(test::config_path("resnet50.toml"));
  Net net(c, Dims{c.input_c, c.input_h, c.input_w});
  BackendOptions o;
  o.precision = Precision::bf16;
  const CommPlan gpu = comm_plan(net, o, Backend::gpu);
  EXPECT_EQ(gpu.buckets, plan_buckets(backward_ranges(net.nodes()), sizeof(float), size_t(8) << 20));
  EXPECT_TRUE(gpu.overlap);
  EXPECT_TRUE(gpu.bucket_updates);
  EXPECT_EQ(gpu.wire_elem_bytes, 2u);
  const nlohmann::json r = comm_plan_record(gpu, net, 2, 1, 256);
  EXPECT_EQ(r.at("params").get<size_t>(), net.weights().size());
  EXPECT_EQ(r.at("hosts"), 1);
  ASSERT_EQ(r.at("bucket_bytes").size(), gpu.buckets.size());
  EXPECT_EQ(r.at("bucket_bytes")[0].get<double>(), 2.0 * double(gpu.buckets[0].size()));
  const std::vector<double> ready = r.at("bucket_ready_flops").get<std::vector<double>>();
  ASSERT_EQ(ready.size(), gpu.buckets.size());
  for (size_t i = 1; i < ready.size(); ++i) EXPECT_GE(ready[i], ready[i - 1]) << "bucket " << i;
  // The fc layer's 2 M weights (the first bucket) are ready early; the stem's (the last) at the end.
  EXPECT_LT(ready.front(), 0.05);
  EXPECT_DOUBLE_EQ(ready.back(), 1.0);
  o.grad_comm = GradComm::fp8;
  EXPECT_EQ(comm_plan(net, o, Backend::gpu).wire_elem_bytes, 1u);
  EXPECT_EQ(comm_plan(net, o, Backend::gpu).grad_comm, "fp8");
  EXPECT_EQ(comm_plan(net, o, Backend::gpu).buckets, gpu.buckets);  // cut by fp32 bytes whatever the wire
  o.grad_comm = GradComm::int4;  // 4 bits a gradient and a 4-byte scale a block of 64
  EXPECT_EQ(comm_plan(net, o, Backend::gpu).wire_elem_bytes, 0.5625);
  EXPECT_EQ(comm_plan(net, o, Backend::gpu).grad_comm, "int4");
  EXPECT_EQ(comm_plan(net, o, Backend::gpu).buckets, gpu.buckets);
  o.grad_comm = GradComm::fp8_int4;  // a byte a gradient there, 0.5625 back
  EXPECT_EQ(comm_plan(net, o, Backend::gpu).wire_elem_bytes, 0.78125);
  EXPECT_EQ(comm_plan(net, o, Backend::gpu).grad_comm, "fp8-int4");
  o.grad_comm = GradComm::fp32;
  EXPECT_EQ(comm_plan(net, o, Backend::gpu).wire_elem_bytes, 4u);

  const CommPlan cpu = comm_plan(net, o, Backend::cpu);
  EXPECT_EQ(cpu.buckets, (std::vector<FlatRange>{{0, net.weights().size()}}));
  EXPECT_FALSE(cpu.overlap);
  EXPECT_EQ(cpu.wire_elem_bytes, 4u);
}

// --grad-comm auto: fp32 for exact arithmetic; fp8 only where the gradients leave a host and every
// rank sums fp8; else bf16. A choice given is kept whatever the reach.
TEST(CommPlan, AutoSendsFp8OnlyBetweenHostsThatAllSumIt) {
  const CommReach one_host{1, true}, hosts{2, true}, hosts_no_fp8{2, false};
  EXPECT_EQ(grad_comm_for(GradComm::automatic, Precision::bf16, one_host), GradComm::bf16);
  EXPECT_EQ(grad_comm_for(GradComm::automatic, Precision::bf16, hosts), GradComm::fp8);
  EXPECT_EQ(grad_comm_for(GradComm::automatic, Precision::tf32, hosts), GradComm::fp8);
  EXPECT_EQ(grad_comm_for(GradComm::automatic, Precision::bf16, hosts_no_fp8), GradComm::bf16);
  EXPECT_EQ(grad_comm_for(GradComm::automatic, Precision::fp32, hosts), GradComm::fp32);
  EXPECT_EQ(grad_comm_for(GradComm::automatic, Precision::bf16), GradComm::bf16);
  for (GradComm g : {GradComm::bf16, GradComm::fp32, GradComm::fp8, GradComm::int4, GradComm::fp8_int4})
    for (const CommReach& r : {one_host, hosts, hosts_no_fp8}) EXPECT_EQ(grad_comm_for(g, Precision::bf16, r), g);
}

// --bucket-mb left out: 8 MiB of fp32 gradients, 32 with fp8 on the wire (a quarter of the bytes a
// gradient: 8 MB an all-reduce, which the link needs to run at its rate); given, it is kept. The
// checkpoint records the size the run used, and a resume keeps it.
TEST(CommPlan, BucketsDefaultTo8MiBAnd32WithFp8) {
  EXPECT_EQ(default_bucket_mb(GradComm::bf16), 8.0);
  EXPECT_EQ(default_bucket_mb(GradComm::fp32), 8.0);
  EXPECT_EQ(default_bucket_mb(GradComm::fp8), 32.0);
  EXPECT_EQ(default_bucket_mb(GradComm::int4), 32.0);
  EXPECT_EQ(default_bucket_mb(GradComm::fp8_int4), 32.0);
  const std::string tmp = small_run_dir("comm_plan_buckets");
  const auto bucket_mb = [&](const std::string& flags) {
    const std::string ck = tmp + "/ck";
    std::remove(ck.c_str());
    EXPECT_EQ(test::run(test::kTrain + " --config " + tmp + "/net.toml --data " + tmp +
                        "/data --batch 12 --epochs 1 --threads 1 --log-every 0 --device cpu --checkpoint " + ck +
                        flags + " 2> " + tmp + "/err"),
              0)
        << flags << ": " << read_whole_file(tmp + "/err");
    return read_checkpoint(ck).info.at("bucket_mb").get<double>();
  };
  EXPECT_EQ(bucket_mb(" --grad-comm bf16"), 8.0);
  EXPECT_EQ(bucket_mb(" --grad-comm fp8"), 32.0);
  EXPECT_EQ(bucket_mb(" --grad-comm fp8 --bucket-mb 4"), 4.0);
  EXPECT_EQ(bucket_mb(" --grad-comm int4"), 32.0);
  EXPECT_EQ(bucket_mb(" --grad-comm bf16 --bucket-mb 16"), 16.0);
  bucket_mb(" --grad-comm fp8");
  ASSERT_EQ(test::run(test::kTrain + " --resume " + tmp + "/ck --epochs 2 --log-every 0 2> " + tmp + "/err"), 0)
      << read_whole_file(tmp + "/err");
  EXPECT_EQ(read_checkpoint(tmp + "/ck").info.at("bucket_mb").get<double>(), 32.0);
}

TEST(CommPlan, TrainWritesTheRecordAndWithProfileTheMeasuredShares) {
  ASSERT_TRUE(file_exists(test::kTrain)) << test::kTrain;
  const std::string tmp = small_run_dir("comm_plan");
  const std::string m = tmp + "/m.jsonl";
  ASSERT_EQ(test::run(test::kTrain + " --config " + tmp + "/net.toml --data " + tmp +
                      "/data --batch 12 --epochs 2 --threads 1 --log-every 0 --device cpu --profile --metrics " + m +
                      " 2> " + tmp + "/err"),
            0)
      << read_whole_file(tmp + "/err");
  const std::vector<nlohmann::json> plans = records(m, "comm_plan");
  ASSERT_EQ(plans.size(), 1u);
  EXPECT_EQ(plans[0].at("ranks"), 1);
  EXPECT_EQ(plans[0].at("local_batch"), 12);
  EXPECT_EQ(plans[0].at("overlap"), false);
  ASSERT_EQ(plans[0].at("bucket_bytes").size(), 1u);
  EXPECT_EQ(plans[0].at("bucket_bytes")[0].get<double>(), 4.0 * plans[0].at("params").get<double>());
  for (const nlohmann::json& e : records(m, "epoch"))
    EXPECT_EQ(e.at("bucket_ready_profile"), nlohmann::json::array({1.0})) << e.dump();
}

// The record's hosts are those NCCL sees: ranks of one machine are one host, unless NCCL_HOSTID
// (which NCCL takes for the host's identity, as benchmarks/simnode.sh sets it) tells them apart.
TEST(CommPlan, TheRecordCountsTheHostsAsNcclSeesThem) {
  const std::string tmp = small_run_dir("comm_plan_hosts");
  const std::string args = " " + test::kTrain + " --config " + tmp + "/net.toml --data " + tmp +
                           "/data --batch 12 --epochs 1 --threads 1 --log-every 0 --device cpu --metrics ";
  auto hosts = [&](const std::string& launch, const std::string& name) {
    const std::string m = tmp + "/" + name + ".jsonl";
    std::remove(m.c_str());
    EXPECT_EQ(test::run(launch + " 2> " + tmp + "/err"), 0) << name << ": " << read_whole_file(tmp + "/err");
    const std::vector<nlohmann::json> plans = records(m, "comm_plan");
    return plans.size() == 1 ? plans[0].at("hosts").get<int>() : -1;
  };
  EXPECT_EQ(hosts("mpirun -np 2" + args + tmp + "/one.jsonl", "one"), 1);
  EXPECT_EQ(hosts("mpirun -np 2 -x NCCL_HOSTID=same" + args + tmp + "/same.jsonl", "same"), 1);
  EXPECT_EQ(hosts("mpirun -np 1 -x NCCL_HOSTID=a" + args + tmp + "/two.jsonl : -np 1 -x NCCL_HOSTID=b" + args + tmp +
                      "/two.jsonl",
                  "two"),
            2);
}
