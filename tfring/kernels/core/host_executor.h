// HostExecutor: runs fusion groups of host-memory tensors through a Backend (MPI in the
// library, the in-process backend in tests). A lone tensor goes from its input straight to
// its output; a fused group is packed into a fusion buffer, reduced or gathered in one call,
// and unpacked. Prescale, postscale and Average's division happen here, on the host, since
// MPI only sums.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tfring/kernels/core/backend.h"
#include "tfring/kernels/core/group_executor.h"

namespace tfring {

class HostExecutor : public GroupExecutor {
 public:
  HostExecutor(std::unique_ptr<Backend> backend, int rank, int size);

  const char* name() const override { return backend_->name(); }
  Status Allreduce(const std::vector<Entry*>& group, const Response& r) override;
  Status Allgather(const std::vector<Entry*>& group,
                   const std::vector<const Response*>& rs) override;
  Status Broadcast(const std::vector<Entry*>& group, const Response& r) override;
  Status Reducescatter(const std::vector<Entry*>& group, const Response& r) override;
  Status Alltoall(const std::vector<Entry*>& group, const Response& r) override;

  Backend* backend() { return backend_.get(); }

 private:
  // Average's division and the postscale factor, from the reduced `from` into `to` (which
  // may be `from`): a fused tensor leaves the fusion buffer scaled, in one pass.
  void Postprocess(DataType dtype, double postscale, const Response& r, const void* from,
                   void* to, int64_t count);
  // A grouped op's unit whose tensors differ in dtype (MixedParts): one reduction per run of
  // tensors of one dtype, in the unit's own buffer.
  Status AllreduceMixedUnit(Entry& e, const Response& r);
  char* FusionBuffer(size_t which, size_t bytes);
  // The timeline's name for the backend call: "MPI_ALLREDUCE", ...
  std::string PhaseName(const char* collective) const;

  std::unique_ptr<Backend> backend_;
  const int rank_;
  const int size_;
  std::vector<char> fusion_buffers_[2];
};

}  // namespace tfring
