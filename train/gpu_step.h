// One training or evaluation step on this rank's GPU: the loader's raw batch goes up from pinned
// memory on a copy stream; augmentation, forward and backward run on the compute stream, the
// bucketed NCCL all-reduce and the fused optimiser updates beside it (GradientSync), all captured
// once as a CUDA graph and replayed. With gradient accumulation the batch goes up and is computed
// as micro-batches, each but the last captured without the all-reduce and the update.
#pragma once
#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "input/loader.h"
#include "input/sample_format.h"
#include "shared/cuda_owners.h"
#include "train/cuda/cuda_graph.h"
#include "train/cuda/gpu_context.h"
#include "train/cuda/normalize_input.h"
#include "train/gpu_net.h"
#include "train/gradient_sync.h"
#include "train/micro_batches.h"
#include "train/optimizer.h"
#include "train/weight_average.h"

namespace convoy::gpu {

// Seconds summed over steps, from CUDA events. h2d and idle are time the compute stream had
// nothing to do: waiting for the batch's copy (unhidden h2d) or for the host to queue the step.
// comm_exposed is the part of the all-reduce not hidden behind the backward pass (from its end to
// the last all-reduce's end); update, what follows (the updates still running, or all of them).
// With accumulation each covers every micro-batch of the steps; `steps` counts optimiser steps.
// fp8_clipped: with fp8 on the wire, the bucket-steps clipped (GradientSync::take_clipped).
struct StepTimes {
  double h2d = 0, idle = 0, fwd = 0, bwd = 0, comm_exposed = 0, update = 0;
  long long steps = 0, fp8_clipped = 0;
};

// Loss sum, top-1 hits and samples of the training steps since the last take, and the mean loss
// of the last step; skipped: the steps among them whose loss was NaN or infinite (on any rank),
// whose update was skipped and whose figures are left out of the sums.
struct StepMetrics {
  double loss_sum = 0, hits = 0, samples = 0, last_loss = 0;
  long long skipped = 0;
};

// The first training step (counted from 0, the first since construction) whose loss was NaN or
// infinite, and its mean loss on this rank (finite where only another rank's was not); step -1: none yet.
struct NonFiniteStep {
  long long step = -1;
  float loss = 0;
};

struct GpuStepOptions {
  MathMode math = MathMode::tf32;  // bf16: bf16 NHWC activations, fp32 weights and optimiser state
  bool graph = true;               // capture the step as a CUDA graph (off: queue it op by op)
  GradSyncOptions sync;            // several ranks: the gradients' all-reduce and the updates
  bool profile = false;            // time every node (waits for each step)
  AlgoSearch algos = AlgoSearch::heuristic;
  size_t workspace_bytes = size_t(1) << 30;   // cuDNN workspace (bounds the algorithms it may use)
  InputFold input_fold = InputFold::patches;  // bf16: how a first convolution of few channels reads its input
  // A step whose loss is not finite never updates the weights or the optimiser state; with this,
  // batch norm's running statistics are kept as they were before it too (a copy per step).
  bool skip_nonfinite = false;
  // [train] accumulate: train() takes a batch of up to accumulate x max_batch samples and runs it
  // as this many micro-batches, their fp32 gradients summed on the device (micro_batches.h) and
  // their mean all-reduced and applied once, with the last.
  int accumulate = 1;
};

class GpuStep {
 public:
  // net: topology and the starting weights/state; opt: the optimiser state to continue from;
  // sample: the shape and normalisation of the loader's raw batches' samples (Loader::sample_format);
  // average ([train] ema; null: none): the weights' moving average to continue, kept on the device.
  GpuStep(int device, const Net& net, const Optimizer& opt, const SampleFormat& sample, int max_batch, int rank,
          int ranks, const GpuStepOptions& o, const WeightAverage* average = nullptr);
  ~GpuStep();
  GpuStep(const GpuStep&) = delete;
  GpuStep& operator=(const GpuStep&) = delete;

  // Queues one training step on a raw batch (HostBatch::pixels) and returns without waiting for it;
  // the host waits only when it reuses the buffers of the micro-batch two before (with accumulate =
  // 1, of the step two before). With accumulate = k, b.n is a multiple of k: the micro-batches are
  // b's samples [i x b.n / k, (i + 1) x b.n / k), in that order.
  void train(const HostBatch& b, uint64_t key, double lr);
  // Each step's loss is checked on the device, which skips the update of a step whose loss (any of
  // its micro-batches') is NaN or infinite; the host learns of it when it waits for that step: in
  // train() at most two steps later, in take_metrics(), take_times(), sync_to() and evaluate() at once.
  NonFiniteStep first_nonfinite() const { return nonfinite_; }
  // Waits for the queued steps; their metrics (and the last step's loss) since the last take.
  StepMetrics take_metrics();
  // Forward in evaluation mode; waits, then losses()/probs() hold the batch's figures.
  void evaluate(const HostBatch& b);
  const float* losses() const { return reinterpret_cast<const float*>(losses_host_.data()); }
  const float* probs() const { return reinterpret_cast<const float*>(probs_host_.data()); }
  // Copies weights, running statistics and optimiser state back (checkpoints, the end of training),
  // and the moving average into `average` where the step keeps one.
  void sync_to(Net& net, Optimizer& opt, WeightAverage* average = nullptr);
  // With an average: exchanges it with the weights and running statistics the net computes with.
  void swap_average();
  // Several ranks (collective): rank 0's running statistics, and its moving average's, on every
  // rank, broadcast with NCCL (Step::sync_state says why rank 0's); with one rank, nothing.
  // With fp8 on the wire it also agrees on each bucket's largest gradient of the last step, which
  // fp8_maxima() then returns (for a checkpoint).
  void sync_state();
  const std::vector<float>& fp8_maxima() const { return fp8_maxima_; }
  // Before the first step: a checkpoint's fp8_maxima(), so that the first step scales as the
  // uninterrupted run's next one would; false where they do not fit this step's buckets or wire.
  bool set_fp8_maxima(const std::vector<float>& m) { return sync_ && sync_->set_maxima(ctx_.stream(), m); }
  bool fp8_on_the_wire() const { return sync_ && scaled_fp8(o_.sync.precision); }
  // Waits for the queued steps; their phase times since the last take.
  StepTimes take_times();
  // With GpuStepOptions::profile: adds the per-node times of the steps so far to net's profile.
  void add_profile_to(Net& net);
  const char* device_name() const { return name_.c_str(); }
  size_t arena_bytes() const { return arena_.bytes(); }
  // The device memory the step holds: its arena and the context's cuDNN and cuBLAS workspaces.
  size_t device_bytes() const { return arena_.bytes() + ctx_.workspaces_bytes(); }
  InputFold input_fold() const { return net_.input_layout().fold; }
  bool graphed() const {
    for (const auto& [size, sized] : graphs_)
      for (const CudaGraphExec& g : sized.graph)
        if (g) return true;
    return false;
  }
  // Input sizes (height, width) with at least one captured graph, for tests.
  int graphed_sizes() const {
    int n = 0;
    for (const auto& [size, sized] : graphs_)
      for (const CudaGraphExec& g : sized.graph)
        if (g) {
          ++n;
          break;
        }
    return n;
  }
  // Evaluation passes captured as graphs, one per input size and batch, for tests.
  int eval_graphs() const {
    int n = 0;
    for (const auto& [shape, g] : eval_graphs_) n += g.graph ? 1 : 0;
    return n;
  }
  // Bytes each training step puts on the wire, per rank (0 for one rank).
  double comm_bytes_per_step() const { return sync_ ? sync_->wire_bytes_per_step() : 0.0; }

 private:
  struct Slot;        // pinned and device buffers of one (micro-)batch in flight
  struct StepEvents;  // the events recorded around one (micro-)batch
  // Which micro-batch of its step a part is: the first, the last, or (accumulate = 1) both.
  struct Part {
    bool first = true, last = true;
  };
  // A part's graph: one per slot and kind of part, for each input size.
  static int graph_index(int slot, Part p) { return slot * 4 + (p.first ? 1 : 0) + (p.last ? 2 : 0); }
  // The graphs of one input size ([data] progressive trains at several), and the step at which the
  // size first came, which runs op by op.
  struct SizeGraphs {
    long long first_step = 0;
    CudaGraphExec graph[8];  // by graph_index
  };
  // An evaluation pass's graph: captured at the second pass of its input size and batch, after the
  // first, op by op, made the convolutions' plans for that shape (an algorithm search may not be
  // captured).
  struct EvalGraph {
    bool planned = false;
    CudaGraphExec graph;
  };
  void use_input(const HostBatch& b);
  void queue_evaluation(const Slot& sl, int n);
  void queue_part(const HostBatch& b, int from, int n, const StepScalars& sc, Part part);
  void queue_normalize(const Slot& sl, int n);
  void queue_compute(int slot, int n, Part part);
  void queue_metrics(int n, const int32_t* labels, StepScalars* scalars, Part part);
  void queue_backward_and_update(const Slot& sl, StepScalars* scalars);
  void queue_update(const UpdateSpan& at, const Gradients& g, const StepScalars* scalars);
  void request_lars(size_t params);
  LarsDevice lars_device() const;
  void harvest(long long part);
  void drain();

  Context ctx_;
  Arena arena_;  // every tensor of the net and of the step, in one allocation
  GpuNet net_;
  Optimizer host_opt_;  // recipe and step count; its arrays live on the device
  InputShape input_;    // the batch now queued: its size, and its layout on the device
  Dims built_;          // the net's input as built, the largest
  int max_batch_, ranks_;
  GpuStepOptions o_;
  std::unique_ptr<GradientSync> sync_;  // several ranks
  std::vector<float> fp8_maxima_;       // as agreed at the last sync_state()
  CudaStream copy_stream_;
  DeviceBuffer<unsigned char> x_;  // the augmented batch, in the net's storage (GpuNet::stores_bf16())
  DeviceBuffer<float> m_, v_, scale_shift_;
  DeviceBuffer<uint32_t> no_decay_;  // Optimizer::no_decay (empty: every parameter decays)
  // LARS (Optimizer::lars): its plan, and per chunk its sums, per tensor its rate (empty: not LARS).
  DeviceBuffer<LarsTensor> lars_tensors_;
  DeviceBuffer<LarsChunk> lars_chunks_;
  DeviceBuffer<double> lars_sums_;
  DeviceBuffer<float> lars_rates_;
  DeviceBuffer<double> acc_;           // StepMetrics, accumulated on the device
  DeviceBuffer<float> state_before_;   // skip_nonfinite: the running statistics before the step
  DeviceBuffer<float> avg_w_, avg_s_;  // [train] ema: the moving average (empty: none)
  DeviceBuffer<float> grad_sum_;       // accumulate > 1: the gradients of a step's micro-batches so far
  DeviceBuffer<MicroCarry> carry_;     // accumulate > 1: their verdict and figures
  double decay_ = 0;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<std::unique_ptr<StepEvents>> events_;      // a ring of four parts
  std::map<std::pair<int, int>, SizeGraphs> graphs_;     // by input height and width
  std::map<std::array<int, 3>, EvalGraph> eval_graphs_;  // by input height, width and batch
  long long step_ = 0;                                   // training steps queued
  // Parts queued: the micro-batches of the steps (with accumulate = 1, the steps themselves).
  long long parts_ = 0;
  std::deque<long long> pending_;  // queued parts whose times are not yet harvested
  long long gap_from_ = -1;        // first part whose idle gap to its predecessor is meaningful
  PinnedBuffer losses_host_, probs_host_, acc_host_;
  PinnedBuffer checks_host_;  // per slot, the StepScalars of its last part as the part left them
  long long skipped_ = 0;     // steps with a non-finite loss harvested since the last take_metrics
  NonFiniteStep nonfinite_;
  StepTimes times_;
  bool profile_ = false;  // per-node times, collected after every part
  std::string name_;
};

}  // namespace convoy::gpu
