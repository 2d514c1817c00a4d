// The backend step: what the training loop asks of the CPU or the CUDA backend (train on a batch,
// evaluate one, hand over the sums and the phase times), and the one factory that makes it. Only
// the factory (step_factory.cpp without CUDA, step_factory.cu with it) knows which backends exist.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "input/loader.h"
#include "input/sample_format.h"
#include "train/evaluation.h"
#include "train/net.h"
#include "train/optimizer.h"
#include "train/train_options.h"
#include "train/weight_average.h"

namespace convoy {

// The input a batch's samples are: HostBatch::height x width ([data] progressive trains at smaller
// crops than the net was built for), or for a batch made by hand (0) the net's input as built.
inline Dims batch_input(const HostBatch& b, Dims built) {
  return b.height > 0 ? Dims{built.c, b.height, b.width} : built;
}

// A training epoch's figures on this rank: the loss summed over its samples, the top-1 hits, the
// samples, and the steps skipped because their loss was NaN or infinite (left out of the rest).
struct EpochSums {
  double loss = 0, correct = 0, samples = 0;
  long long skipped = 0;
};

// Seconds the steps spent in each phase since the last take. comm_exposed: the time the gradients'
// averaging over the ranks held the step up, beyond what the backward pass hid of it. idle: time
// the device waited for the host to queue a step, for a backend that queues them (none on the CPU).
// comm_bytes: the bytes those steps put on the wire, per rank (bucket_plan.h counts them).
// fp8_clipped: with fp8 gradients on the wire, the bucket-steps whose largest gradient passed twice
// the step before's, clipped there (gradient_sync.h); absent on other wires.
struct PhaseTimes {
  double h2d = 0, fwd = 0, bwd = 0, update = 0, comm_exposed = 0;
  std::optional<double> idle;
  double comm_bytes = 0;
  long long steps = 0;
  std::optional<long long> fp8_clipped;
};

// The first training step (counted from 0, the first since the step was made) whose loss was NaN
// or infinite, and its mean loss on this rank (finite where only another rank's was not); step -1:
// none yet.
struct NonFiniteLoss {
  long long step = -1;
  double loss = 0;
};

class Step : public Forward {
 public:
  // Trains on one batch (the rank's share of a global batch: one optimiser step), or queues it.
  // With StepSetup::accumulate = k, as k micro-batches of b.n / k, consecutive slices of b, whose
  // gradients are summed before one all-reduce and one update. Figures the backend keeps (on the
  // device) join `sums` at fold(); the others join them now, so that they are added in the order
  // the steps ran.
  virtual void train(const HostBatch& b, uint64_t key, double lr, EpochSums& sums) = 0;
  // Adds the figures the backend still keeps to `sums`; returns the last step's mean loss.
  virtual double fold(EpochSums& sums) = 0;
  // Known once the host has waited for that step: after train() at most two steps later, at once
  // after fold(). A step with a non-finite loss never updates the weights or the optimiser state.
  virtual NonFiniteLoss first_nonfinite() const = 0;
  virtual PhaseTimes take_times() = 0;
  // Weights, running statistics and optimiser state back into net and opt (for a checkpoint), and
  // the moving average into StepSetup::average where there is one.
  virtual void sync_to(Net& net, Optimizer& opt) = 0;
  // With StepSetup::average: exchanges the weights and running statistics the step trains with
  // their average, so that evaluate() between two calls uses the average; without one, nothing.
  virtual void swap_average() = 0;
  // Several ranks (collective; nothing with one): puts rank 0's running statistics (batch norm's,
  // and the moving average's with StepSetup::average) on every rank, so that every rank evaluates
  // and checkpoints the same ones. Rank 0's rather than the ranks' mean (PyTorch DDP's
  // broadcast_buffers): rank 0's statistics follow from rank 0's batches alone and no call changes
  // them, so a run that checkpoints, stops or evaluates at other steps keeps them bit for bit, and a
  // run resumed from its checkpoint (which holds rank 0's) evaluates exactly as the uninterrupted
  // one; a mean would replace every rank's at each call and round differently from there. Training
  // steps never read the running statistics (they normalise by the batch's), so they are unchanged.
  virtual void sync_state() = 0;
  // With fp8 gradients on the wire: each bucket's largest gradient of the last step, as agreed at
  // the last sync_state(), for a checkpoint (empty on other wires); and set back before a resumed
  // run's first step, so that its scales are those the uninterrupted run's next step had (false
  // where they do not fit).
  virtual std::vector<float> wire_maxima() const { return {}; }
  virtual bool set_wire_maxima(const std::vector<float>&) { return false; }
  // With profiling: the per-node times the backend measured itself join net's profile.
  virtual void add_profile_to(Net& net) = 0;
  // The seconds the set-up took, where it is worth a metrics line (the GPU's).
  virtual std::optional<double> setup_seconds() const = 0;
  // The device memory the step holds, where it has its own (the GPU's); the CPU's is the net's.
  virtual std::optional<double> device_bytes() const { return std::nullopt; }
};

enum class Backend { cpu, gpu };

// --device to a backend: automatic takes a GPU when one is visible; one asked for but absent (or a
// build without CUDA) is an error.
Backend choose_backend(Device device);

// Whether this rank's GPU for `device` (the local rank's, as the step picks it) can sum fp8
// gradients with NCCL; false on the CPU backend and in a build without CUDA.
bool fp8_wire_supported(Device device, int local_rank);

// What a step is built from. net and opt: the topology and the state to start from, which the CPU
// step trains in place; sample: the raw batches' sample shape and normalisation (the loader's);
// max_batch: the largest micro-batch (with accumulate = 1, the largest batch).
struct StepSetup {
  Net& net;
  Optimizer& opt;
  const SampleFormat& sample;
  int max_batch = 1;
  int rank = 0, ranks = 1, local_rank = 0;
  BackendOptions backend;
  bool skip_nonfinite = false, profile = false;
  // [train] ema: the weights' moving average to start from, updated after every optimiser step
  // (the CPU step's in place, the GPU's on the device and into it at sync_to); null: none.
  WeightAverage* average = nullptr;
  // [train] accumulate: the micro-batches of each batch that train() is given.
  int accumulate = 1;
};

std::unique_ptr<Step> make_step(Backend backend, const StepSetup& s);

}  // namespace convoy
