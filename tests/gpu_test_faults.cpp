// GPU faults through the real binary (CONVOY_TRAIN names it away from the build folder): a batch
// that cannot fit in GPU memory is refused in one line before training starts; a loss that
// overflows to NaN stops the CUDA backend's run at that step (the host learns of it from the
// per-step flag the GPU leaves in pinned memory, at most two steps late) or, with
// --skip-nonfinite, is skipped on the device, in fp32 and bf16; and the CPU and CUDA backends
// stop at the same step of the same run.
#include <gtest/gtest.h>

#include "nonfinite_case.h"

using namespace convoy;
using namespace convoy::test;

namespace {

// One 3x3 convolution of 16,384 filters at the stored size: 822 M values an image for its output
// alone, 3.3 GB in fp32; from 3 images on, more values than a cuDNN tensor holds (2^31 - 1).
const char* kWideConv = R"(
[train]
lr = 0.01
[[layer]]
type = "conv"
filters = 16384
kernel = 3
pad = 1
[[layer]]
type = "relu"
[[layer]]
type = "global_avg_pool"
[[layer]]
type = "fc"
units = "classes"
[[layer]]
type = "softmax_xent"
)";

// Twelve 3x3 convolutions of 512 filters at 224 px, each with its ReLU: 25.7 M values an image per
// output (1.6 G at a batch of 64, within cuDNN's limit), 6.6 GB per output in fp32 at that batch, so
// outputs and gradients alone take over 150 GB.
std::string deep_conv() {
  std::string toml = "[train]\nlr = 0.01\n";
  for (int i = 0; i < 12; ++i)
    toml += "[[layer]]\ntype = \"conv\"\nfilters = 512\nkernel = 3\npad = 1\n[[layer]]\ntype = \"relu\"\n";
  return toml + "[[layer]]\ntype = \"global_avg_pool\"\n[[layer]]\ntype = \"fc\"\nunits = \"classes\"\n" +
         "[[layer]]\ntype = \"softmax_xent\"\n";
}

// A run of `config` (a file of `dir`) at a batch of 64 (the whole dataset, so that the batch is
// refused for the GPU, not for the data's size): it must fail before its first step, in one line.
std::string refused_line(const std::string& dir, const std::string& config) {
  const std::string ckpt = dir + "/run.ckpt";
  std::remove(ckpt.c_str());
  const Outcome o = train_run(dir, "oom",
                              "--config " + dir + "/" + config + " --data " + dir +
                                  "/data --batch 64 --epochs 1 --device cuda --threads 1 --log-every 1 --checkpoint " +
                                  ckpt);
  EXPECT_NE(o.rc, 0) << o.err;
  EXPECT_EQ(o.err.find("epoch 1"), std::string::npos) << o.err;
  EXPECT_FALSE(file_exists(ckpt));
  const std::vector<std::string> errors = lines_containing(o.err, "error");
  EXPECT_EQ(errors.size(), 1u) << o.err;
  return errors.empty() ? std::string() : errors[0];
}

void prepare_oom(const std::string& dir) {
  ASSERT_TRUE(file_exists(kTrain)) << kTrain;
  if (!file_exists(dir + "/data/dataset.json"))
    ASSERT_EQ(
        run(kTrain + " synth --out " + dir + "/data --files 2 --per-file 32 --size 224 --channels 3 --classes 10"), 0);
  write_file_atomic(dir + "/wide_conv.toml", kWideConv);
  write_file_atomic(dir + "/deep_conv.toml", deep_conv());
}

}  // namespace

// Hundreds of GB at a batch of 64: refused naming the device, the memory needed and free.
TEST(GpuFaults, BatchBeyondGpuMemoryIsRefusedBeforeTraining) {
  const std::string dir = scratch_dir("convoy_gpu_faults", "oom");
  ASSERT_NO_FATAL_FAILURE(prepare_oom(dir));
  const std::string line = refused_line(dir, "deep_conv.toml");
  EXPECT_NE(line.find("cuda:"), std::string::npos) << line;
  EXPECT_NE(line.find("MiB"), std::string::npos) << line;
  EXPECT_NE(line.find("are free"), std::string::npos) << line;
  EXPECT_NE(line.find("--batch"), std::string::npos) << line;
}

// An output of 52.6 G values at a batch of 64: refused naming the layer and the largest batch
// cuDNN can describe. (cuDNN's own descriptor check counts in 32 bits: 64 x 16,384 x 224 x 224
// wraps to 2^30 and passed it, leaving the memory check to refuse the run by luck.)
TEST(GpuFaults, BatchBeyondCudnnTensorLimitIsRefusedBeforeTraining) {
  const std::string dir = scratch_dir("convoy_gpu_faults", "oom");
  ASSERT_NO_FATAL_FAILURE(prepare_oom(dir));
  const std::string line = refused_line(dir, "wide_conv.toml");
  EXPECT_NE(line.find("2^31 - 1"), std::string::npos) << line;
  EXPECT_NE(line.find("at most 2)"), std::string::npos) << line;
  EXPECT_NE(line.find("--batch"), std::string::npos) << line;
}

TEST(GpuFaults, NonFiniteLossStopsOrIsSkippedFp32) {
  const std::string dir = scratch_dir("convoy_gpu_faults", "nonfinite");
  ASSERT_NO_FATAL_FAILURE(prepare_overflow(dir));
  EXPECT_GE(check_nonfinite(dir, "bn", "--device cuda --precision fp32", "gpu-bn-fp32"), 2);
  EXPECT_GE(check_nonfinite(dir, "fc", "--device cuda --precision fp32", "gpu-fc-fp32"), 2);
}

TEST(GpuFaults, NonFiniteLossStopsOrIsSkippedBf16) {
  const std::string dir = scratch_dir("convoy_gpu_faults", "nonfinite");
  ASSERT_NO_FATAL_FAILURE(prepare_overflow(dir));
  EXPECT_GE(check_nonfinite(dir, "bn", "--device cuda --precision bf16", "gpu-bn-bf16"), 2);
}

// The overflow is far beyond float's range by the step it happens (the loss grows by more than
// 10^15 a step), so the backends' different summation orders do not move it.
TEST(GpuFaults, NonFiniteStepIsTheCpuBackendsStep) {
  const std::string dir = scratch_dir("convoy_gpu_faults", "nonfinite");
  ASSERT_NO_FATAL_FAILURE(prepare_overflow(dir));
  const std::string common = "--config " + dir + "/fc.toml --data " + dir +
                             "/data --epochs 2 --batch 8 --threads 1 --seed 3 --log-every 0";
  const long long cpu = nonfinite_step(train_run(dir, "same-cpu", common + " --device cpu").err);
  EXPECT_EQ(cpu, 4);
  for (const char* precision : {"fp32", "tf32"}) {
    const Outcome gpu = train_run(dir, std::string("same-") + precision,
                                  common + " --device cuda --precision " + precision);
    EXPECT_EQ(nonfinite_step(gpu.err), cpu) << precision << ": " << gpu.err;
  }
}
