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

std::string tmp_dir(const std::string& name) {
  const char* env = std::getenv("TMPDIR");
  const std::string dir = std::string(env ? env : "/tmp") + "/convoy_gpu_faults/" + name;
  make_dirs(dir);
  return dir;
}

// One 3x3 convolution of 16,384 filters at the stored size: 822 M values an image for its output
// alone, 3.3 GB in fp32.
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

}  // namespace

// A convolution whose output takes 3.3 GB an image, at a batch of 64 (the whole dataset, so that the
// batch is refused for the GPU's memory, not for the data's size): hundreds of GB, beyond any GPU.
TEST(GpuFaults, BatchBeyondGpuMemoryIsRefusedBeforeTraining) {
  const std::string dir = tmp_dir("oom");
  ASSERT_TRUE(file_exists(kTrain)) << kTrain;
  if (!file_exists(dir + "/data/dataset.json"))
    ASSERT_EQ(
        run(kTrain + " synth --out " + dir + "/data --files 2 --per-file 32 --size 224 --channels 3 --classes 10"), 0);
  write_file_atomic(dir + "/wide_conv.toml", kWideConv);
  const std::string ckpt = dir + "/run.ckpt";
  std::remove(ckpt.c_str());
  const Outcome o = train_run(dir, "oom",
                              "--config " + dir + "/wide_conv.toml --data " + dir +
                                  "/data --batch 64 --epochs 1 --device cuda --threads 1 --log-every 1 --checkpoint " +
                                  ckpt);
  EXPECT_NE(o.rc, 0) << o.err;
  const std::vector<std::string> errors = lines_containing(o.err, "error");
  ASSERT_EQ(errors.size(), 1u) << o.err;
  EXPECT_NE(errors[0].find("cuda:"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("MiB"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("are free"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("--batch"), std::string::npos) << errors[0];
  EXPECT_EQ(o.err.find("epoch 1"), std::string::npos) << o.err;
  EXPECT_FALSE(file_exists(ckpt));
}

TEST(GpuFaults, NonFiniteLossStopsOrIsSkippedFp32) {
  const std::string dir = tmp_dir("nonfinite");
  ASSERT_NO_FATAL_FAILURE(prepare_overflow(dir));
  EXPECT_GE(check_nonfinite(dir, "bn", "--device cuda --precision fp32", "gpu-bn-fp32"), 2);
  EXPECT_GE(check_nonfinite(dir, "fc", "--device cuda --precision fp32", "gpu-fc-fp32"), 2);
}

TEST(GpuFaults, NonFiniteLossStopsOrIsSkippedBf16) {
  const std::string dir = tmp_dir("nonfinite");
  ASSERT_NO_FATAL_FAILURE(prepare_overflow(dir));
  EXPECT_GE(check_nonfinite(dir, "bn", "--device cuda --precision bf16", "gpu-bn-bf16"), 2);
}

// The overflow is far beyond float's range by the step it happens (the loss grows by more than
// 10^15 a step), so the backends' different summation orders do not move it.
TEST(GpuFaults, NonFiniteStepIsTheCpuBackendsStep) {
  const std::string dir = tmp_dir("nonfinite");
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
