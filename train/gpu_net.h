// The CUDA backend's net: the same nodes, shapes and flat parameter layout as a CPU Net, run with
// the CUDA twins in gpu_ops.h. Every buffer is allocated here, once, for the largest batch; the
// step itself allocates nothing.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "train/gpu_context.h"
#include "train/layers/gpu_ops.h"
#include "train/net.h"

namespace convoy::gpu {

class GpuNet {
 public:
  // `net` gives the topology and the parameter layout; it must outlive this object. With an
  // arena, the buffers are requested from it and usable once its owner commits it; without one,
  // the net makes and commits its own.
  GpuNet(Context& ctx, const Net& net, int max_batch, Arena* arena = nullptr);

  // Weights and running statistics in the CPU Net's flat layout.
  void upload(const std::vector<float>& weights, const std::vector<float>& state);
  void download(std::vector<float>& weights, std::vector<float>& state) const;

  // x: device [n, input dims] floats; labels: device int32 [n]; key: device pointer to the step's
  // key and sample_keys: device [n] (dropout). Queues the forward pass on the context's stream;
  // per-sample losses stay on the device. Reads no host value that changes from step to step, so
  // the queued work can be captured once as a CUDA graph.
  void forward(int n, const float* x, const int32_t* labels, bool train, const uint64_t* key,
               const uint64_t* sample_keys);
  // Gradients of the mean loss of the last forward into grads(). After each node's gradients are
  // queued, `ready(lo, hi)` (if set) is told their range [lo, hi) of the flat buffer; nodes come in
  // reverse order, so the ranges move from the end of the buffer to its start.
  void backward(const std::function<void(size_t lo, size_t hi)>& ready = nullptr);

  // Per-node forward/backward events (recorded inside a captured graph too): collect_profile adds
  // their times up once the step is complete (the next step records them again), and
  // move_profile_to hands the sums to the CPU net's profile.
  void set_profiling(bool on);
  void collect_profile();
  void move_profile_to(Net& into);

  float* weights() { return weights_.get(); }
  float* grads() { return grads_.get(); }
  float* state() { return state_.get(); }
  size_t param_count() const { return weights_.size(); }
  const float* probs() const { return probs_.get(); }    // device [n, classes]
  const float* losses() const { return losses_.get(); }  // device [n]
  int classes() const { return net_.classes(); }

 private:
  struct NodeBuffers {
    DeviceBuffer<float> y, dy, aux;
    DeviceBuffer<int32_t> argmax;
  };
  const ConvPlan& plan(int node, int n);
  const float* input_of(int node, int k) const;

  Context& ctx_;
  const Net& net_;
  int max_batch_, n_ = 0;
  bool train_ = false;
  const float* x_ = nullptr;
  const int32_t* labels_ = nullptr;
  Arena own_arena_;
  DeviceBuffer<float> weights_, grads_, state_, probs_, losses_, scratch_;
  std::vector<NodeBuffers> buf_;
  std::map<std::pair<int, int>, std::unique_ptr<ConvPlan>> plans_;  // (node, batch) -> plan
  std::unique_ptr<CudaEvent[]> events_;  // 4 per node when profiling: fwd start/end, bwd start/end
  std::vector<std::pair<double, double>> times_;  // per node: forward, backward seconds so far
};

}  // namespace convoy::gpu
