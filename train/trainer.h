// The training run and the stand-alone evaluation, driven by the command line: the loop that
// ties loader, net, all-reduce, optimiser, evaluation, logs and checkpoints together.
#pragma once
#include <cstdint>
#include <string>

namespace convoy {

struct TrainOptions {
  std::string config, data, val;
  int epochs = 0, batch = 0;  // 0: from the config
  uint64_t seed = 1;
  int threads = 0;            // OpenMP threads for compute; 0: all cores of this rank's share
  int readers = 0, prefetch = 0, window_files = 4;  // readers 0: loader_sizing.h chooses
  int local_ranks = 1;        // ranks on this node (MpiContext), for the loader's default size
  int log_every = 100;
  std::string metrics;        // JSONL path ("" = none)
  std::string checkpoint;     // written every checkpoint_every steps, on a signal and at the end
  long long checkpoint_every = 0;
  std::string resume;
  long long stop_after = 0;   // stop (and checkpoint) after this many steps in total
  std::string device = "auto";     // cpu | cuda | auto (a GPU when one is visible)
  std::string precision = "tf32";  // CUDA backend: fp32 (exact float), tf32 (tensor cores) or bf16 (bf16 NHWC activations)
  bool cuda_graph = true;          // CUDA backend: replay the step as a captured CUDA graph
  bool space_to_depth = true;      // CUDA backend, bf16: a stride-2 first convolution reads 2x2 pixel blocks
  std::string cudnn_algos = "heuristic";  // CUDA backend: heuristic (repeatable) | measure (fastest)
  int cudnn_workspace_mb = 1024;           // CUDA backend: cuDNN workspace
  bool skip_nonfinite = false;  // a step whose loss is NaN or infinite is skipped (no update), not fatal
  bool print_net = false;
  bool profile = false;       // per-layer forward/backward times after each epoch
};

struct EvalOptions {
  std::string checkpoint, data;
  int batch = 256, threads = 0, readers = 0, local_ranks = 1;
};

struct EvalResult {
  double loss = 0, top1 = 0, top5 = 0;
  long long samples = 0;
};

// Returns the process exit code.
int run_training(const TrainOptions& o, int rank, int ranks);
int run_eval(const EvalOptions& o, int rank, int ranks);

}  // namespace convoy
