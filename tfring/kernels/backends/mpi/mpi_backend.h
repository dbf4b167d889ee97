// Backend over MPI for host buffers, on tfring's own duplicate of MPI_COMM_WORLD.
// Data collectives are blocking MPI calls (MPI's tuned algorithms; a lone tensor goes from
// the op's input straight to its output), except a reducescatter of 256 KiB or more, which
// runs tfring's own ring of MPI_Sendrecv and MPI_Reduce_local (RingReducescatter: faster than
// Open MPI 5.0's MPI_Reduce_scatter for large buffers, docs/benchmarks-sharded.md). tfring's own MPI ops
// (MpiOwnOps) reduce 16-bit floats, and integers so that they wrap as TensorFlow does.
//
// With UseHierarchicalAllreduce (TFRING_HIERARCHICAL_ALLREDUCE=1), an allreduce is a reduce
// to each host's first rank, an allreduce among those ranks across hosts, and a broadcast
// within each host: one message per host crosses the network instead of one per rank.
#pragma once

#include <mpi.h>

#include <vector>

#include "tfring/kernels/core/backend.h"
#include "tfring/kernels/backends/mpi/mpi_own_ops.h"

namespace tfring {

class MpiBackend : public Backend {
 public:
  // Takes ownership of `comm`.
  explicit MpiBackend(MPI_Comm comm);
  ~MpiBackend() override;
  Status Init();  // creates tfring's own MPI types and ops (MpiOwnOps)

  const char* name() const override { return "MPI"; }
  const char* allreduce_phase() const override {
    return local_ != MPI_COMM_NULL ? "HIERARCHICAL_ALLREDUCE" : "ALLREDUCE";
  }
  // Takes ownership of `local` (this host's ranks) and `cross` (the ranks with this rank's
  // local rank: for each host's first rank, the hosts' first ranks).
  void UseHierarchicalAllreduce(MPI_Comm local, MPI_Comm cross);
  Status Allreduce(const void* in, void* out, int64_t count, DataType dtype,
                   ReduceOp op) override;
  Status Allgather(const void* in, void* out, const std::vector<int64_t>& bytes_per_rank) override;
  Status Broadcast(void* buffer, int64_t bytes, int root) override;
  Status Reducescatter(const void* in, void* out, const std::vector<int64_t>& counts,
                       DataType dtype, ReduceOp op) override;
  Status Alltoall(const void* in, const std::vector<int64_t>& send_bytes, void* out,
                  const std::vector<int64_t>& recv_bytes) override;

 private:
  // The MPI op that reduces `dtype` with `op`: tfring's own where it has one.
  MPI_Op OpFor(DataType dtype, ReduceOp op) const;
  Status HierarchicalAllreduce(const void* in, void* out, int count, MPI_Datatype type,
                               MPI_Op op);
  Status RingReducescatter(const void* in, void* out, const std::vector<int>& counts,
                           DataType dtype, MPI_Datatype type, MPI_Op op);

  MPI_Comm comm_;
  MPI_Comm local_ = MPI_COMM_NULL, cross_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  MpiOwnOps own_;
  std::vector<char> ring_scratch_;  // RingReducescatter's two running sums
};

}  // namespace tfring
