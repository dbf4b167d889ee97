// StagingExecutor: GPU tensors through a host executor (MPI), by way of host memory.
//
// Used when GPU operations are set to go through MPI (TFRING_GPU_OPERATIONS=mpi): each
// tensor of a group is copied to a host buffer once its producer is done, the group runs on
// the host executor exactly as host tensors do (fusion, scaling and all), and the results are
// copied back into the GPU outputs before the op completes. Slower than NCCL (two copies and
// a host synchronization per tensor), and correct on any MPI.
//
// Failures: an input one rank cannot stage (its producer's kernel failed, a copy failed) is
// agreed on before any rank enters the host collective (AgreeStagedIn), so the group fails
// on every rank at once with that rank's reason; a result one rank cannot copy back fails
// there alone (its peers' results are whole).
#pragma once

#include <memory>
#include <vector>

#include "tfring/kernels/core/device_memory.h"
#include "tfring/kernels/core/group_executor.h"
#include "tfring/kernels/core/host_executor.h"

namespace tfring {

class StagingExecutor : public GroupExecutor {
 public:
  StagingExecutor(std::unique_ptr<DeviceMemory> memory, std::unique_ptr<HostExecutor> host,
                  int rank, int size);

  const char* name() const override { return "MPI (staged through host memory)"; }
  Status Allreduce(const std::vector<Entry*>& group, const Response& r) override;
  Status Allgather(const std::vector<Entry*>& group,
                   const std::vector<const Response*>& rs) override;
  Status Broadcast(const std::vector<Entry*>& group, const Response& r) override;
  Status Reducescatter(const std::vector<Entry*>& group, const Response& r) override;
  Status Alltoall(const std::vector<Entry*>& group, const Response& r) override;
  void set_timeline(Timeline* timeline) override {
    timeline_ = timeline;
    host_->set_timeline(timeline);
  }

 private:
  // Host twins of a group's entries: same requests, host buffers.
  struct Staged {
    std::vector<Entry> entries;
    std::vector<std::vector<char>> buffers;   // each input, copied to the host
    std::vector<std::vector<char>> gathered;  // allgather, reducescatter: each output
    std::vector<Entry*> pointers;
  };
  // Waits for each input, copies it to its twin's buffer; then AgreeStagedIn.
  Status StageIn(const std::vector<Entry*>& group, Staged* staged);
  Status StageInThisRank(const std::vector<Entry*>& group, Staged* staged);
  // Every rank's StageIn outcome, agreed over the host backend before the collective: OK on
  // every rank, or the first failing rank's error on every rank. Without it a rank that
  // could not stage would leave its peers in the collective for ever (or, had it joined
  // with an unwritten buffer, hand them a wrong result). Costs one int32 allreduce a group.
  Status AgreeStagedIn(const Status& mine);
  Status StageOut(const std::vector<Entry*>& group, const Staged& staged);
  // Allgather, alltoall: each twin allocates the GPU output and a host buffer of its size
  // once the host executor knows the shape.
  void AllocateOutputsLater(const std::vector<Entry*>& group, Staged* staged);

  std::unique_ptr<DeviceMemory> memory_;
  std::unique_ptr<HostExecutor> host_;
  const int rank_, size_;
};

}  // namespace tfring
