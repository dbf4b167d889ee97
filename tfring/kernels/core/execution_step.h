// ExecutionStep: step 4 of the cycle. Runs a cycle's responses set by set (in the order
// the sets first appear, the same on every rank; only the sets this rank is a member of)
// and fusion group by fusion group (fusion.h), through each set's host or device executor
// (set_executors.h), with a joined rank's stand-ins (joined_stand_ins.h) in place of the
// data it does not have; then finishes this rank's own entries with the group's status.
//
// Who calls it: only the thread that runs a cycle, so unlocked (but supports_sets(), fixed
// at construction, from any thread). It owns the executors of every process set; the
// entries it finishes are CycleEntries'.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tfring/kernels/core/backend.h"
#include "tfring/kernels/core/cycle_entries.h"
#include "tfring/kernels/core/cycle_responses.h"
#include "tfring/kernels/core/flight_recorder.h"
#include "tfring/kernels/core/group_executor.h"
#include "tfring/kernels/core/set_executors.h"
#include "tfring/kernels/core/straggler_watch.h"
#include "tfring/kernels/core/timeline.h"

namespace tfring {

class ExecutionStep {
 public:
  // `fusion_alone_bytes`: a tensor at least this large runs alone (Options). When each of
  // this rank's entries was agreed and started goes into `recorder`; how long each waited
  // for its agreement, into `straggler_watch`. The rest as SetExecutorTable's constructor.
  ExecutionStep(std::unique_ptr<Backend> backend, int rank, int size,
                std::unique_ptr<GroupExecutor> device, ProcessSetFactory process_sets,
                int64_t fusion_alone_bytes, Timeline* timeline, FlightRecorder* recorder,
                StragglerWatch* straggler_watch);

  // Runs `responses`, fusing up to `fusion_threshold_bytes` a group, and finishes each of
  // them that is one of `entries`' own. Returns the bytes of the collectives it ran.
  int64_t Run(const CycleItems& responses, int64_t fusion_threshold_bytes,
              CycleEntries* entries);
  // Whether process sets other than all ranks can run at all. Any thread.
  bool supports_sets() const { return executors_.supports_sets(); }

 private:
  // Runs the responses of one process set that this rank is a member of.
  int64_t RunInSet(const std::vector<int32_t>& members, const CycleItems& responses,
                   int64_t fusion_threshold_bytes, CycleEntries* entries);

  const int rank_;
  const int size_;
  const std::vector<int32_t> all_ranks_;  // 0 .. size - 1
  const int64_t fusion_alone_bytes_;
  Timeline* const timeline_;
  FlightRecorder* const recorder_;
  StragglerWatch* const straggler_watch_;
  SetExecutorTable executors_;
};

}  // namespace tfring
