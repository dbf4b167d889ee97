// Backend over an InprocWorld: collectives on host buffers between ranks that are threads
// of one process. Reductions combine the ranks' inputs in rank order with ReduceInto
// (common/elementwise.h), so every rank gets bit-identical results, float16 included.
// See core/backend.h for the calling contract.
#pragma once

#include <memory>

#include "tfring/kernels/core/backend.h"
#include "tests/cpp/inproc/inproc_world.h"

namespace tfring {

class InprocBackend : public Backend {
 public:
  // Shares `world` with the other ranks' backends; `rank` in [0, world->size()).
  InprocBackend(std::shared_ptr<InprocWorld> world, int rank);

  const char* name() const override { return "inproc"; }
  Status Allreduce(const void* in, void* out, int64_t count, DataType dtype,
                   ReduceOp op) override;
  Status Allgather(const void* in, void* out, const std::vector<int64_t>& bytes_per_rank) override;
  Status Broadcast(void* buffer, int64_t bytes, int root) override;
  Status Reducescatter(const void* in, void* out, const std::vector<int64_t>& counts,
                       DataType dtype, ReduceOp op) override;
  Status Alltoall(const void* in, const std::vector<int64_t>& send_bytes, void* out,
                  const std::vector<int64_t>& recv_bytes) override;

 private:
  std::shared_ptr<InprocWorld> world_;
  int rank_;
};

}  // namespace tfring
