// SetExecutorTable: which executors run a process set's collectives. All ranks run on the
// job's own (the host executor over the backend, and the device executor); any other set
// on those the ProcessSetFactory makes for its members on first use, kept until shutdown.
//
// Owned by the execution step (execution_step.h), used only by the thread that runs a
// cycle, so unlocked (but supports_sets(), fixed at construction, from any thread).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "tfring/kernels/common/status.h"
#include "tfring/kernels/core/backend.h"
#include "tfring/kernels/core/group_executor.h"
#include "tfring/kernels/core/host_executor.h"
#include "tfring/kernels/core/timeline.h"

namespace tfring {

// The executors of one process set: host tensors, and GPU tensors (may be null); or why
// the set could not be made.
struct SetExecutors {
  std::unique_ptr<GroupExecutor> host;
  std::unique_ptr<GroupExecutor> device;
  Status status;
};

// Makes the executors of the process set `members` (global ranks, ascending). Called on
// the coordinator thread of each member, at the same point of their common collectives,
// once per set: it returns the same status on every member.
using ProcessSetFactory =
    std::function<Status(const std::vector<int32_t>& members, SetExecutors* out)>;

class SetExecutorTable {
 public:
  // `device` may be null (no GPU path); `make` may be null (no process sets but the
  // global one). Every executor records into `timeline`.
  SetExecutorTable(std::unique_ptr<Backend> backend, int rank, int size,
                   std::unique_ptr<GroupExecutor> device, ProcessSetFactory make,
                   Timeline* timeline);

  // The executors of the set `members` (all ranks: the job's own); the set's error when
  // it could not be made (then and every later time: making it again would be a
  // collective the other members never join).
  Status For(const std::vector<int32_t>& members, GroupExecutor** host,
             GroupExecutor** device);
  // Whether sets other than all ranks can be made at all.
  bool supports_sets() const { return static_cast<bool>(make_); }

 private:
  const int size_;
  HostExecutor host_;
  std::unique_ptr<GroupExecutor> device_;
  ProcessSetFactory make_;
  Timeline* const timeline_;
  std::map<std::vector<int32_t>, SetExecutors> sets_;  // by members; made on first use
};

}  // namespace tfring
