// Backend over MPI for host buffers, on tfring's own duplicate of MPI_COMM_WORLD.
// Data collectives are blocking MPI calls (MPI's tuned algorithms; a lone tensor goes from
// the op's input straight to its output). float16/bfloat16 use MpiHalfOps.
#pragma once

#include <mpi.h>

#include "tfring/kernels/backends/backend.h"
#include "tfring/kernels/backends/mpi/mpi_half_ops.h"

namespace tfring {

class MpiBackend : public Backend {
 public:
  // Takes ownership of `comm`.
  explicit MpiBackend(MPI_Comm comm);
  ~MpiBackend() override;
  Status Init();  // creates the 16-bit float types and ops

  const char* name() const override { return "MPI"; }
  Status Allreduce(const void* in, void* out, int64_t count, DataType dtype,
                   ReduceOp op) override;
  Status Allgather(const void* in, void* out, const std::vector<int64_t>& bytes_per_rank) override;
  Status Broadcast(void* buffer, int64_t bytes, int root) override;
  Status Reducescatter(const void* in, void* out, const std::vector<int64_t>& counts,
                       DataType dtype, ReduceOp op) override;
  Status Alltoall(const void* in, const std::vector<int64_t>& send_bytes, void* out,
                  const std::vector<int64_t>& recv_bytes) override;

  // Call when a peer is lost: the communicator must then not be freed.
  void Abandon() { abandoned_ = true; }

 private:
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  MpiHalfOps half_;
  bool abandoned_ = false;
};

}  // namespace tfring
