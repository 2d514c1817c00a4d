// The CPU backend's passes give the same bits at any thread count: OpenMP's (one, a few, and far
// more than the cores) and OpenBLAS's own, which a process that never sets it (a GPU test's CPU
// reference) takes from the host's core count; also with OpenBLAS's generic x86-64 kernels, which
// (unlike some CPU-specific ones) split a threaded sgemm's sums otherwise than a serial one.
#include <cblas.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "rel_l2.h"
#include "train/net.h"
#include "train/net_config.h"

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
