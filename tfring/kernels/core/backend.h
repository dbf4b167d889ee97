// Backend: runs one collective on raw buffers across all ranks of its communicator.
//
// Contract: called only from the coordinator thread, on every rank with the same sequence
// of calls and the same arguments except the buffers (the coordinator's negotiation makes it
// so). Buffers are host memory for the MPI backend. A non-OK Status carries the backend
// library's own error string; the coordinator fails the ops involved on this rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tfring/kernels/common/status.h"
#include "tfring/kernels/common/types.h"

namespace tfring {

// What a backend returns when handed kAverage, which only the executors know how to
// divide (WireOp, common/types.h): one message for every backend.
inline Status AverageReachedBackend(const char* backend, const char* collective) {
  return Status::Internal(std::string(backend) + "::" + collective + " got kAverage; the "
                          "executor must hand over kSum (WireOp) and divide afterwards");
}

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  // How the timeline names this backend's allreduce, after the backend's name: "ALLREDUCE",
  // or "HIERARCHICAL_ALLREDUCE" where it reduces within each host first.
  virtual const char* allreduce_phase() const { return "ALLREDUCE"; }

  // out = op over ranks of in, element-wise. `in == out` is allowed (in place).
  // `op` is never kAverage (AverageReachedBackend): the executor reduces with kSum and
  // scales.
  virtual Status Allreduce(const void* in, void* out, int64_t count, DataType dtype,
                           ReduceOp op) = 0;
  // out = concatenation over ranks r of each rank's `in` (bytes_per_rank[r] bytes each).
  virtual Status Allgather(const void* in, void* out,
                           const std::vector<int64_t>& bytes_per_rank) = 0;
  // out (counts[rank] elements) = this rank's block of op over ranks of in (the sum of
  // counts elements, block r after block r-1). `op` is never kAverage.
  virtual Status Reducescatter(const void* in, void* out, const std::vector<int64_t>& counts,
                               DataType dtype, ReduceOp op) = 0;
  // Sends send_bytes[r] bytes of `in` (blocks in rank order) to each rank r, and receives
  // recv_bytes[r] bytes from each into `out` (blocks in rank order).
  virtual Status Alltoall(const void* in, const std::vector<int64_t>& send_bytes, void* out,
                          const std::vector<int64_t>& recv_bytes) = 0;
  // Every rank's `buffer` receives root's `bytes` bytes.
  virtual Status Broadcast(void* buffer, int64_t bytes, int root) = 0;
};

}  // namespace tfring
