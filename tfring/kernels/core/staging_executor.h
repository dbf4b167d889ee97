// StagingExecutor: GPU tensors through a host executor (MPI), by way of host memory.
//
// Used when GPU operations are set to go through MPI (TFRING_GPU_OPERATIONS=mpi): each
// tensor of a group is copied to a host buffer once its producer is done, the group runs on
// the host executor exactly as host tensors do (fusion, scaling and all), and the results are
// copied back into the GPU outputs before the op completes. Slower than NCCL (two copies and
// a host synchronization per tensor), and correct on any MPI.
#pragma once

#include <memory>
#include <vector>

#include "tfring/kernels/core/device_memory.h"
#include "tfring/kernels/core/group_executor.h"

namespace tfring {

class StagingExecutor : public GroupExecutor {
 public:
  StagingExecutor(std::unique_ptr<DeviceMemory> memory, std::unique_ptr<GroupExecutor> host,
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
  // Waits for each input, copies it to its twin's buffer.
  Status StageIn(const std::vector<Entry*>& group, Staged* staged);
  Status StageOut(const std::vector<Entry*>& group, const Staged& staged);
  // Allgather, alltoall: each twin allocates the GPU output and a host buffer of its size
  // once the host executor knows the shape.
  void AllocateOutputsLater(const std::vector<Entry*>& group, Staged* staged);

  std::unique_ptr<DeviceMemory> memory_;
  std::unique_ptr<GroupExecutor> host_;
  const int rank_, size_;
};

}  // namespace tfring
