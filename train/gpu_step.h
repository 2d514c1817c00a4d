// One training or evaluation step on this rank's GPU: the host batch goes up on the context's
// stream, GpuNet runs forward and backward, gradients are averaged across ranks with NCCL, and
// the fused optimiser kernel updates the weights. The trainer calls this in place of the CPU net.
#pragma once
#include <memory>
#include <vector>

#include "train/gpu_context.h"
#include "train/gpu_net.h"
#include "train/loader.h"
#include "train/nccl_comm.h"
#include "train/optimizer.h"

namespace convoy::gpu {

struct StepTimes {
  double h2d = 0, fwd = 0, bwd = 0, comm = 0, update = 0;  // seconds, measured with CUDA events
};

class GpuStep {
 public:
  // net: topology and the starting weights/state; opt: the optimiser state to continue from.
  GpuStep(int device, const Net& net, const Optimizer& opt, int max_batch, int rank, int ranks, MathMode math);
  ~GpuStep();

  // Forward, backward, all-reduce and update; returns the batch's mean loss. The per-sample losses
  // and probabilities come back for the metrics (the only values copied to the host each step).
  double train(const HostBatch& b, uint64_t key, double lr);
  // Forward in evaluation mode.
  void evaluate(const HostBatch& b);
  const float* losses() const { return losses_.data(); }  // host copies after train/evaluate
  const float* probs() const { return probs_.data(); }
  // Copies weights, running statistics and optimiser state back (checkpoints, the end of training).
  void sync_to(Net& net, Optimizer& opt);
  StepTimes take_times();
  const char* device_name() const { return name_.c_str(); }

 private:
  void upload(const HostBatch& b);

  Context ctx_;
  GpuNet net_;
  Optimizer host_opt_;  // recipe and step count; its arrays live on the device
  int ranks_;
  std::unique_ptr<NcclComm> nccl_;
  DeviceBuffer<float> x_, m_, v_;
  DeviceBuffer<int32_t> labels_;
  DeviceBuffer<uint64_t> keys_;
  std::vector<float> losses_, probs_;
  std::vector<cudaEvent_t> events_;
  StepTimes times_;
  std::string name_;
};

}  // namespace convoy::gpu
