// The host GPU's NCCL fault-tolerance calls (host_gpu.h), which tfring's elastic resets use
// where NCCL has them (tfring/kernels/backends/nccl/nccl_reshape.cc): ncclCommRevoke,
// ncclCommShrink, ncclCommGetUniqueId and ncclCommGrow, as nccl.h describes them. A shrunk
// or grown communicator is a new set of connections among its members, whose rendezvous
// name each member can work out alone (a shrink's, from its parent's id and the ranks left
// out) or gets through the parent (a grow's, from the parent's first rank).
//
// Where NCCL's can fail or stay in progress, these can be made to, on one rank, so that
// tfring's fallbacks run: TFRING_HOST_GPU_RESHAPE_FAULT=<call>:<fault>@<rank> (the rank in
// MPI's world, OMPI_COMM_WORLD_RANK), e.g. ncclCommShrink:fail@0. `fail`: a shrink or grow
// connects its new communicator, then reports ncclInternalError on it (as a failure in NCCL's
// own set-up); a revoke returns ncclInternalError. `stall`: a revoke stops the collectives but
// stays ncclInProgress for ever.
#include <nccl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <cstring>
#include <string>
#include <vector>

#include "tests/cpp/host_gpu/host_nccl_comm.h"

namespace host_gpu {
namespace {

constexpr uint32_t kGrowId = 100;  // a message kind no collective uses

// The id of the communicator a shrink of `parent` without `excluded` makes: the same on
// every member, and fixed in length however many resets came before.
ncclUniqueId ShrunkId(const ncclUniqueId& parent, const std::vector<int>& excluded) {
  uint64_t hash = 1469598103934665603ull;  // FNV-1a
  auto mix = [&hash](const void* data, size_t bytes) {
    for (size_t i = 0; i < bytes; ++i) {
      hash = (hash ^ static_cast<const unsigned char*>(data)[i]) * 1099511628211ull;
    }
  };
  mix(parent.internal, strnlen(parent.internal, sizeof(parent.internal)));
  for (int r : excluded) mix(&r, sizeof(r));
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  std::snprintf(id.internal, sizeof(id.internal), "tfring-host-nccl-shrunk-%016llx",
                static_cast<unsigned long long>(hash));
  return id;
}

// The fault TFRING_HOST_GPU_RESHAPE_FAULT sets for `call` on this rank ("fail", "stall"), or "".
std::string Fault(const char* call) {
  const char* setting = std::getenv("TFRING_HOST_GPU_RESHAPE_FAULT");
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (setting == nullptr || rank == nullptr) return "";
  const std::string text = setting, prefix = std::string(call) + ":";
  const size_t at = text.find('@');
  if (text.compare(0, prefix.size(), prefix) != 0 || at == std::string::npos ||
      text.substr(at + 1) != rank) {
    return "";
  }
  return text.substr(prefix.size(), at - prefix.size());
}

// Connects `state`, then fails it where the fault says so.
ncclResult_t ConnectUnlessFaulty(const std::shared_ptr<CommState>& state, const char* call) {
  const ncclResult_t rc = state->Connect();
  if (rc != ncclSuccess || Fault(call) != "fail") return rc;
  return state->FailOnPurpose(ncclInternalError, std::string(call) + " failed on purpose "
                                                 "(TFRING_HOST_GPU_RESHAPE_FAULT)");
}

}  // namespace
}  // namespace host_gpu

// Each call where the headers built against declare it, as NCCL's own library has it from
// that version on (tfring looks them up by version, nccl_kept_world.cc).
extern "C" {

#if NCCL_VERSION_CODE >= 22807
ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  if (comm == nullptr || revokeFlags != NCCL_REVOKE_DEFAULT) return ncclInvalidArgument;
  const std::string fault = host_gpu::Fault("ncclCommRevoke");
  if (fault == "fail") {
    return comm->state->FailOnPurpose(ncclInternalError, "ncclCommRevoke failed on purpose "
                                                         "(TFRING_HOST_GPU_RESHAPE_FAULT)");
  }
  if (fault == "stall") {
    comm->state->RevokeWithoutEnd();
    return ncclInProgress;
  }
  comm->state->Revoke();
  return ncclSuccess;
}
#endif

#if NCCL_VERSION_CODE >= 22703
ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                            ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  if (comm == nullptr || newcomm == nullptr || excludeRanksCount < 0) return ncclInvalidArgument;
  host_gpu::CommState& parent = *comm->state;
  std::vector<int> excluded(excludeRanksList, excludeRanksList + excludeRanksCount);
  std::sort(excluded.begin(), excluded.end());
  for (int r : excluded) {
    if (r < 0 || r >= parent.size() || r == parent.rank()) return ncclInvalidArgument;
  }
  if (std::adjacent_find(excluded.begin(), excluded.end()) != excluded.end()) {
    return ncclInvalidArgument;
  }
  // NCCL_SHRINK_ABORT: the parent's operations are stopped first.
  if (shrinkFlags & NCCL_SHRINK_ABORT) parent.Revoke();
  const int below = static_cast<int>(
      std::lower_bound(excluded.begin(), excluded.end(), parent.rank()) - excluded.begin());
  auto* child = new ncclComm;
  child->state = std::make_shared<host_gpu::CommState>(
      parent.rank() - below, parent.size() - excludeRanksCount,
      host_gpu::ShrunkId(parent.id(), excluded));
  *newcomm = child;
  std::shared_ptr<host_gpu::CommState> state = child->state;
  return host_gpu::StartConnecting(child, config, [state] {
    return host_gpu::ConnectUnlessFaulty(state, "ncclCommShrink");
  });
}
#endif

#if NCCL_VERSION_CODE >= 22902
ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId* uniqueId) {
  if (comm == nullptr) return ncclInvalidArgument;
  return ncclGetUniqueId(uniqueId);
}

ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank,
                          ncclComm_t* newcomm, ncclConfig_t* config) {
  if (newcomm == nullptr) return ncclInvalidArgument;
  std::shared_ptr<host_gpu::CommState> parent = comm != nullptr ? comm->state : nullptr;
  if (parent == nullptr ? (uniqueId == nullptr || rank < 0 || rank >= nRanks)
                        : (rank != -1 || nRanks < parent->size() ||
                           (parent->rank() == 0) != (uniqueId != nullptr))) {
    return ncclInvalidArgument;
  }
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (uniqueId != nullptr) id = *uniqueId;
  auto* child = new ncclComm;
  child->state = std::make_shared<host_gpu::CommState>(parent ? parent->rank() : rank, nRanks, id);
  *newcomm = child;
  std::shared_ptr<host_gpu::CommState> state = child->state;
  // Through the parent, its first rank tells the other old members the id; the new ones
  // were given it.
  return host_gpu::StartConnecting(child, config, [state, parent, id]() mutable {
    if (parent != nullptr && parent->rank() == 0) {
      for (int p = 1; p < parent->size(); ++p) {
        const ncclResult_t rc = parent->Send(p, host_gpu::kGrowId, &id, sizeof(id));
        if (rc != ncclSuccess) {
          state->set_async_error(rc);
          return rc;
        }
      }
    } else if (parent != nullptr) {
      const ncclResult_t rc = parent->ReceiveControl(0, host_gpu::kGrowId, &id, sizeof(id), *state);
      if (rc != ncclSuccess) {
        state->set_async_error(rc);
        return rc;
      }
      state->set_id(id);
    }
    return host_gpu::ConnectUnlessFaulty(state, "ncclCommGrow");
  });
}
#endif

}  // extern "C"
