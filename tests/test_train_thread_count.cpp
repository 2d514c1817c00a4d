// The CPU backend's passes give the same bits at any thread count: OpenMP's (one, a few, and far
// more than the cores) and OpenBLAS's own, which a process that never sets it (a GPU test's CPU
// reference) takes from the host's core count; also with OpenBLAS's generic x86-64 kernels, which
// (unlike some CPU-specific ones) split a threaded sgemm's sums otherwise than a serial one. So a run
// stopped at one --threads and resumed at another ends as the uninterrupted run at a third.
#include <cblas.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "rel_l2.h"
#include "shared/atomic_file.h"
#include "shared/mpi_context.h"
#include "train/checkpoint.h"
#include "train/net.h"
#include "train/net_config.h"
#include "train/synthetic_data.h"
#include "train/trainer.h"

using namespace convoy;

namespace {

std::string layer(const std::string& name, const std::string& type, const std::string& keys = "") {
  return "[[layer]]\nname = \"" + name + "\"\ntype = \"" + type + "\"\n" + keys;
}

// A convolution without bias and its batch norm.
std::string conv_bn(const std::string& name, const std::string& keys) {
  return layer(name, "conv", keys + "bias = false\n") + layer(name + ".bn", "batch_norm");
}

// ResNet's shape at 32 px: a stem and max pool, a basic block, a stride-2 block with a 1x1
// projection shortcut, global pooling and the classifier. At 16 images the convolutions run in 16,
// 4 and 1 image groups.
const std::string kResidualNet = conv_bn("stem", "filters = 16\npad = 1\n") + layer("stem.relu", "relu") +
                                 layer("pool", "max_pool", "kernel = 3\nstride = 2\npad = 1\n") +
                                 conv_bn("a1", "filters = 16\npad = 1\n") + layer("a1.relu", "relu") +
                                 conv_bn("a2", "filters = 16\npad = 1\n") +
                                 layer("a.sum", "add", "inputs = [\"a2.bn\", \"pool\"]\n") + layer("a.relu", "relu") +
                                 conv_bn("b1", "filters = 32\nstride = 2\npad = 1\n") + layer("b1.relu", "relu") +
                                 conv_bn("b2", "filters = 32\npad = 1\n") +
                                 conv_bn("b.down", "inputs = \"a.relu\"\nfilters = 32\nkernel = 1\nstride = 2\n") +
                                 layer("b.sum", "add", "inputs = [\"b2.bn\", \"b.down.bn\"]\n") +
                                 layer("b.relu", "relu") + layer("gap", "global_avg_pool") +
                                 layer("fc", "fc", "units = 10\n") + layer("loss", "softmax_xent");

struct Pass {
  double loss = 0;
  std::vector<float> grads, input_grad, state;
};

// One training forward and backward pass from fixed weights and data, run with the given thread
// counts set beforehand, as a process would find them.
Pass run_pass(int omp_threads, int blas_threads) {
  omp_set_num_threads(omp_threads);
  openblas_set_num_threads(blas_threads);
  const Dims input{3, 32, 32};
  const int n = 16;
  Net net(parse_net_config(kResidualNet, "residual.toml"), input, 10);
  net.init_weights(7);
  std::mt19937 rng(3);
  std::normal_distribution<float> d;
  std::vector<float> x(size_t(n) * input.size());
  std::vector<int32_t> labels(n);
  for (float& v : x) v = d(rng);
  for (int32_t& l : labels) l = int32_t(rng() % 10);
  Pass p;
  p.loss = net.forward(n, x.data(), labels.data(), true);
  net.backward(true);
  p.grads = net.grads();
  p.input_grad = net.input_grad();
  p.state = net.state();
  return p;
}

}  // namespace

TEST(ThreadCount, ResidualNetGivesTheSameBitsAtAnyThreadCount) {
  const int omp_before = omp_get_max_threads(), blas_before = openblas_get_num_threads();
  const Pass ref = run_pass(1, 1);
  struct Threads {
    int omp, blas;
  } cases[] = {{2, 1}, {3, 1}, {64, 1}, {1, 64}, {2, 2}, {64, 64}};
  for (const Threads& t : cases) {
    const Pass p = run_pass(t.omp, t.blas);
    const std::string at = std::to_string(t.omp) + " OpenMP and " + std::to_string(t.blas) + " OpenBLAS threads";
    EXPECT_EQ(p.loss, ref.loss) << at << ": the loss differs by " << p.loss - ref.loss;
    EXPECT_TRUE(p.grads == ref.grads) << at << ": weight gradients differ from one thread's by "
                                      << test::rel_l2(p.grads, ref.grads) << " (relative L2)";
    EXPECT_TRUE(p.input_grad == ref.input_grad)
        << at << ": input gradient differs by " << test::rel_l2(p.input_grad, ref.input_grad);
    EXPECT_TRUE(p.state == ref.state) << at << ": running statistics differ by " << test::rel_l2(p.state, ref.state);
  }
  omp_set_num_threads(omp_before);
  openblas_set_num_threads(blas_before);
}

// OpenBLAS reads OPENBLAS_CORETYPE when it loads, so the test above runs again in a new process of
// this binary that names the generic SSE3 kernels (those OpenBLAS falls back to on a CPU it does not
// know; every x86-64 CPU runs them).
TEST(ThreadCount, SoWithOpenBlasGenericKernels) {
  const std::string cmd = "OPENBLAS_CORETYPE=Prescott " + std::filesystem::read_symlink("/proc/self/exe").string() +
                          " --gtest_filter=ThreadCount.ResidualNetGivesTheSameBitsAtAnyThreadCount";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

// 16 images of 16x16 a step, so that the convolution's weight gradients sum 4 image groups.
TEST(ThreadCount, RunResumedAtAnotherThreadCountEndsAsTheUninterruptedOne) {
  static MpiContext mpi(nullptr, nullptr);
  const std::string tmp = std::string(CONVOY_TEST_TMP) + "/thread_count";
  SyntheticSpec spec;
  spec.file_counts = {40, 40, 40, 40};
  spec.shape = {16, 16, 1};
  write_synthetic_dataset(tmp + "/data", spec);
  write_file_atomic(tmp + "/net.toml", "[train]\nlr = 0.05\n" + conv_bn("c", "filters = 8\npad = 1\n") +
                                           layer("r", "relu") + layer("gap", "global_avg_pool") +
                                           layer("fc", "fc", "units = \"classes\"\n") + layer("loss", "softmax_xent"));
  auto options = [&](int threads, const std::string& ckpt) {
    std::remove(ckpt.c_str());
    TrainOptions o;
    o.config = tmp + "/net.toml";
    o.data = tmp + "/data";
    o.epochs = 2;
    o.batch = 16;
    o.threads = threads;
    o.log_every = 0;
    o.checkpoint = ckpt;
    return o;
  };
  ASSERT_EQ(run_training(options(1, tmp + "/full.ckpt"), 0, 1), 0);
  TrainOptions first = options(2, tmp + "/part.ckpt");
  first.stop_after = 7;
  ASSERT_EQ(run_training(first, 0, 1), 0);
  TrainOptions second;
  second.resume = tmp + "/part.ckpt";
  second.threads = 3;
  second.log_every = 0;
  ASSERT_EQ(run_training(second, 0, 1), 0);
  const Checkpoint a = read_checkpoint(tmp + "/full.ckpt"), b = read_checkpoint(tmp + "/part.ckpt");
  EXPECT_EQ(a.info.at("global_step"), b.info.at("global_step"));
  EXPECT_TRUE(a.weights == b.weights) << "weights differ by " << test::rel_l2(b.weights, a.weights);
  EXPECT_TRUE(a.state == b.state) << "running statistics differ by " << test::rel_l2(b.state, a.state);
  // The momentum holds the gradients' last bits, which the weights, far larger, round away.
  EXPECT_TRUE(a.m == b.m) << "momentum differs by " << test::rel_l2(b.m, a.m);
}
