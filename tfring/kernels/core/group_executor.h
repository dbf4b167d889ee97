// GroupExecutor: runs one fusion group (planned by fusion.h, identical on every rank) of
// negotiated entries to completion, through some backend and memory.
//
// The coordinator holds two: one for host tensors (HostExecutor, over MPI), and, when the
// build has a GPU path, one for GPU tensors (NcclExecutor, or StagingExecutor that copies
// through host memory). Called only from the coordinator thread, in the same order on every
// rank. When a call returns OK, every output of the group is written and visible to any
// later reader (host code, or work on any GPU stream); the coordinator then runs the entries'
// done callbacks. A non-OK status fails the whole group on this rank.
#pragma once

#include <string>
#include <vector>

#include "tfring/kernels/common/status.h"
#include "tfring/kernels/core/entry.h"
#include "tfring/kernels/core/message.h"
#include "tfring/kernels/core/timeline.h"

namespace tfring {

class GroupExecutor {
 public:
  virtual ~GroupExecutor() = default;
  virtual const char* name() const = 0;

  // `r` is the group's first response; every member shares its collective, dtype, reduce op
  // and (on a GPU) scale factors. Each entry's own request has its shape and factors.
  virtual Status Allreduce(const std::vector<Entry*>& group, const Response& r) = 0;
  // rs[i] is group[i]'s response (its first_dims: every rank's first dimension).
  virtual Status Allgather(const std::vector<Entry*>& group,
                           const std::vector<const Response*>& rs) = 0;
  virtual Status Broadcast(const std::vector<Entry*>& group, const Response& r) = 0;
  // Never fused: each entry is reduced and scattered on its own. Outputs are preallocated
  // (this rank's ReducescatterRows of the input's rows).
  virtual Status Reducescatter(const std::vector<Entry*>& group, const Response& r) = 0;
  // Never fused. The output (allocated here) holds what each rank sent this rank, in rank
  // order; set_received_splits reports how many rows came from each.
  virtual Status Alltoall(const std::vector<Entry*>& group, const Response& r) = 0;

  // Where the executor records its phases (MEMCPY_IN_FUSION_BUFFER, MPI_ALLREDUCE, ...).
  virtual void set_timeline(Timeline* timeline) { timeline_ = timeline; }

 protected:
  // Whether the timeline records: callers build a phase's name and arguments (strings, a
  // JSON object naming the group's first tensor) only then, not for every fused group of
  // every cycle.
  bool recording() const { return timeline_ != nullptr && timeline_->active(); }
  void Phase(const std::vector<Entry*>& group, const std::string& phase,
             const std::string& args = "") {
    if (recording()) timeline_->GroupPhase(group, phase, args);
  }
  Timeline* timeline_ = nullptr;
};

}  // namespace tfring
