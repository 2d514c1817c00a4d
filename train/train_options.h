// What `train` is asked to do: the options of a training run and of `train eval`, with the named
// choices (device, precision, convolution algorithms) as enums that the command line parses once.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "input/epoch_plan.h"
#include "train/input_fold.h"

namespace convoy {

enum class Device { cpu, cuda, automatic };            // automatic: a GPU when one is visible
enum class Precision { fp32, tf32, bf16 };             // CUDA backend: exact float, tensor cores, bf16 NHWC activations
enum class ConvAlgos { heuristic, measure, fastest };  // CUDA backend: how cuDNN's algorithms are chosen
// CUDA backend, several ranks: the gradients' precision on the wire; automatic: fp32 with
// Precision::fp32 (exact float arithmetic asked for); else fp8 (e4m3, scaled per bucket) where the
// ranks span hosts and every rank's GPU and NCCL can sum it, where the link is the bound; else bf16.
// int4 (int4_wire.h: 4-bit blocks of 32 with their own scales, rounded stochastically, an all-to-all
// and an all-gather) and fp8_int4 (fp8's scaled reduce-scatter, then the owners' sums all-gathered
// as int4 blocks) are asked for by name.
enum class GradComm { automatic, bf16, fp32, fp8, int4, fp8_int4 };
// Whether the wire carries e4m3 scaled by the buckets' agreed maxima (fp8, fp8_int4), and whether it
// carries int4 blocks (int4, fp8_int4).
inline bool scaled_fp8(GradComm g) { return g == GradComm::fp8 || g == GradComm::fp8_int4; }
inline bool int4_blocks(GradComm g) { return g == GradComm::int4 || g == GradComm::fp8_int4; }

// Where the ranks' gradients travel, which GradComm::automatic is resolved for: the hosts the ranks
// span (MpiContext::hosts), and whether every rank can sum e4m3 (fp8_wire_supported, step.h).
struct CommReach {
  int hosts = 1;
  bool fp8 = false;
};

// A choice's spellings, in the order the help text lists them.
template <typename E>
using Names = std::vector<std::pair<std::string, E>>;
const Names<Device>& device_names();
const Names<Precision>& precision_names();
const Names<ConvAlgos>& conv_algos_names();
const Names<InputFold>& input_fold_names();
const Names<GradComm>& grad_comm_names();
const Names<SampleOrder>& order_names();
// GradComm::automatic resolved for the precision and the ranks' reach; the others as they are.
GradComm grad_comm_for(GradComm asked, Precision precision, CommReach reach = {});
// --bucket-mb left out: 8 MiB of fp32 gradients (4 MB on the wire in bf16), 32 with fp8 (8 MB), int4
// (4.5 MB) and fp8_int4, so that each all-reduce across hosts carries enough bytes to run at the
// link's rate (docs/PERFORMANCE.md).
double default_bucket_mb(GradComm g);
// Bytes a gradient takes on the wire, as an all-reduce's: fp32 4, bf16 2, fp8 1, int4 0.5625 with its
// block's scale, fp8_int4 0.78125 (a byte there, 0.5625 back); and the bytes of the scale each
// bucket's all-reduce needs first (fp8 and fp8_int4: its largest magnitude, all-reduced with max;
// else none).
double grad_comm_elem_bytes(GradComm g);
size_t grad_comm_scale_bytes(GradComm g);

template <typename E>
const std::string& name_of(const Names<E>& names, E value) {
  for (const auto& [name, e] : names)
    if (e == value) return name;
  return names.front().first;  // unreachable: every value has a name
}

// Where the step runs, and how the CUDA backend computes and sets itself up.
struct BackendOptions {
  Device device = Device::automatic;
  Precision precision = Precision::tf32;
  bool cuda_graph = true;                     // replay the step as a captured CUDA graph
  InputFold input_fold = InputFold::patches;  // bf16: how a first convolution of few channels reads its input
  ConvAlgos conv_algos = ConvAlgos::heuristic;
  int cudnn_workspace_mb = 1024;
  // Several ranks: the gradients' all-reduce (bf16 sums, or fp32 means; weights and optimiser state
  // stay fp32 either way), its bucket size in MiB of fp32 gradients, and whether each bucket's update
  // starts as its all-reduce ends (or one update follows the last all-reduce).
  GradComm grad_comm = GradComm::automatic;
  double bucket_mb = 8;  // left out: default_bucket_mb of the resolved grad_comm
  bool bucket_updates = true;
};

struct TrainOptions {
  std::string config, data, val;        // resuming: the checkpoint's when not given
  std::optional<int> epochs, batch;     // unset: the config's (resuming: the checkpoint's)
  bool batch_auto = false;              // --batch auto: the fastest power of two per rank (batch_tuner.h)
  std::optional<uint64_t> seed;         // unset: 1 (resuming: the checkpoint's)
  int threads = 0;                      // OpenMP threads for compute; 0: all cores of this rank's share
  int readers = 0, prefetch = 0;        // readers 0: loader_sizing.h chooses
  std::optional<int> window_files;      // the shuffle window in batch files; unset: 4 (resuming: the checkpoint's)
  std::optional<SampleOrder> order;     // how samples are dealt to ranks; unset: local (resuming: the checkpoint's)
  int local_rank = 0, local_ranks = 1;  // this rank's place on its node (MpiContext): GPU, default sizes
  CommReach reach;                      // what --grad-comm auto is resolved for
  int log_every = 100;
  std::string metrics;     // JSONL path ("" = none)
  std::string checkpoint;  // written every checkpoint_every steps, on a signal and at the end; resuming: --resume's
  long long checkpoint_every = 0;
  std::string resume;
  long long stop_after = 0;  // stop (and checkpoint) after this many steps in total; 0: none
  BackendOptions backend;
  // The backend flags given on the command line (--precision, --grad-comm, --input-fold, --cudnn-algos,
  // --cudnn-workspace, --bucket-mb, --device): a resumed run takes the checkpoint's where one was not
  // given, and refuses one of the arithmetic given otherwise (run_spec.h).
  std::vector<std::string> backend_given;
  bool given(const char* flag) const {
    for (const std::string& f : backend_given)
      if (f == flag) return true;
    return false;
  }
  bool skip_nonfinite = false;  // a step whose loss is NaN or infinite is skipped (no update), not fatal
  bool print_net = false;
  bool profile = false;  // per-layer forward/backward times after each epoch
};

struct EvalOptions {
  std::string checkpoint, data;
  int batch = 256, threads = 0, readers = 0, local_ranks = 1;  // threads, readers 0: as a training run chooses
};

}  // namespace convoy
