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

#include <vector>

#include "tfring/kernels/common/status.h"
#include "tfring/kernels/core/entry.h"
#include "tfring/kernels/core/message.h"

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
};

}  // namespace tfring
