// The metrics file's account of how a step's gradients travel between ranks, for an iteration-time
// model (scripts/iteration_model.py): the buckets' bytes on the wire and where in the backward pass each is ready.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/bucket_plan.h"
#include "train/net.h"
#include "train/step.h"
#include "train/train_options.h"

namespace convoy {

// The all-reduces a step of this backend sends, whatever the ranks (one rank sends none, but the
// plan is the one more ranks would use): the CUDA backend's buckets (GradientSync), started as the
// backward pass completes each; the CPU backend's one all-reduce of every fp32 gradient after it.
struct CommPlan {
  std::vector<FlatRange> buckets;  // in the order they are sent
  double wire_elem_bytes = 4;
  bool overlap = false;         // an all-reduce starts as its bucket is ready (else after the backward pass)
  bool bucket_updates = false;  // each bucket's update starts as its all-reduce ends
  std::string grad_comm = "fp32";
};

CommPlan comm_plan(const Net& net, const BackendOptions& o, Backend backend);

// The share of the backward pass done when each bucket is complete: the nodes' costs summed in the
// order the backward pass runs them (the last node first) up to the node that completes the bucket,
// over the sum of every node's cost; `cost` is each node's, indexed like nodes.
std::vector<double> bucket_ready_fractions(const std::vector<Node>& nodes, const std::vector<FlatRange>& buckets,
                                           const std::vector<double>& cost);

// The nodes' backward costs as their forward FLOPs (a proxy known before any step runs), and as the
// seconds --profile measured.
std::vector<double> flops_cost(const std::vector<Node>& nodes);
std::vector<double> profiled_backward_cost(const std::vector<Node>& nodes);

// The metrics file's "comm_plan" record: ranks, the hosts they span, batch per rank, the plan, each
// bucket's elements and bytes on the wire, and its ready share by FLOPs.
nlohmann::json comm_plan_record(const CommPlan& p, const Net& net, int ranks, int hosts, int local_batch);

}  // namespace convoy
