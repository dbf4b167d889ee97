// NcclExecutor's world communicator across an elastic reset (nccl_kept_world.h): made from the
// one the last runtime kept, as the ranks' claims plan it (core/communicator_reshape.h), and
// revoked rather than aborted after a failure, so that the next runtime can shrink it.
//
// Why: making a NCCL communicator anew repeats its whole set-up (a unique id, every rank's
// bootstrap connections, the topology search, the transports); shrinking or growing one reuses
// what the members had (NCCL's fault-tolerance calls, made for this). Which way it went is in
// the debug log and KeptWorld's note (tools/gpu_checks.sh measures both ways on a GPU).
#include <chrono>
#include <thread>

#include "tfring/kernels/backends/nccl/nccl_check.h"
#include "tfring/kernels/backends/nccl/nccl_executor.h"
#include "tfring/kernels/common/logging.h"

namespace tfring {
namespace {

// How long a revoked communicator may take to stop its work before it is aborted instead.
constexpr auto kRevokeDeadline = std::chrono::seconds(5);

ncclConfig_t NonBlocking() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

}  // namespace

Status NcclExecutor::MakeWorld(KeptComm* kept, const std::vector<KeptClaim>& claims) {
  const ReshapePlan plan = PlanReshape(claims);
  Status s;
  switch (plan.kind) {
    case ReshapePlan::Kind::kKeep:
      world_.comm = kept->comm;
      world_.rank = layout_.rank;
      world_.size = layout_.size;
      world_lineage_ = kept->lineage;
      break;
    case ReshapePlan::Kind::kShrink:
      s = ShrinkWorld(kept, plan.excluded);
      break;
    case ReshapePlan::Kind::kGrow:
      s = GrowWorld(kept);
      break;
    case ReshapePlan::Kind::kMakeNew:
      if (kept != nullptr) ncclCommAbort(kept->comm);  // local: frees this rank's part alone
      s = InitComm(world_host_.get(), layout_.rank, layout_.size, "world", &world_,
                   &world_lineage_);
      break;
  }
  TFRING_RETURN_IF_ERROR(s);
  const std::string how = ReshapeKindName(plan.kind);
  KeptWorld::NoteMade(how);
  TFRING_LOG(kDebug) << "NCCL world communicator " << how << ": rank " << world_.rank << " of "
                     << world_.size << " on GPU " << device_
                     << (plan.why.empty() ? "" : " (" + plan.why + ")");
  if (keep_world_ && !options_.nccl_reshape_off) {
    KeptComm mine;
    mine.comm = world_.comm;
    mine.device = device_;
    mine.rank = world_.rank;
    mine.size = world_.size;
    mine.lineage = world_lineage_;
    KeptWorld::Lease(mine, this);
    world_leased_ = true;
  }
  return Status::OK();
}

Status NcclExecutor::ShrinkWorld(KeptComm* kept, const std::vector<int32_t>& excluded) {
  std::vector<int> leave(excluded.begin(), excluded.end());
  ncclConfig_t config = NonBlocking();
  world_.rank = layout_.rank;
  world_.size = layout_.size;
  // A revoked parent has stopped its work; one kept after a lost peer between collectives
  // may still have NCCL's own threads waiting on that peer: stop them first.
  const int flags = kept->revoked ? kNcclShrinkDefault : kNcclShrinkAbort;
  const ncclResult_t rc = ReshapeCalls().shrink(kept->comm, leave.data(),
                                                static_cast<int>(leave.size()), &world_.comm,
                                                &config, flags);
  Status s;
  if (rc != ncclSuccess && rc != ncclInProgress) {
    world_.comm = nullptr;
    s = Fail(NcclStatus(rc, kept->comm, "ncclCommShrink", __FILE__, __LINE__));
  } else {
    s = Launched(rc, "ncclCommShrink", {&world_});
  }
  ncclCommAbort(kept->comm);  // the parent's resources: NCCL leaves them to the caller
  kept->comm = nullptr;
  TFRING_RETURN_IF_ERROR(s);
  world_lineage_ = DerivedLineage(kept->lineage, excluded, layout_.size);
  return Status::OK();
}

Status NcclExecutor::GrowWorld(KeptComm* kept) {
  const NcclReshapeCalls& calls = ReshapeCalls();
  // The old rank 0 (the new one too: old ranks come first) makes the id from its
  // communicator; the new ranks get it through MPI, with everyone else.
  ncclUniqueId id;
  const Status shared = ShareId(
      world_host_.get(), layout_.rank, "grown world",
      [&](ncclUniqueId* out) { return calls.unique_id_for_grow(kept->comm, out); }, &id);
  if (!shared.ok()) {
    if (kept != nullptr) ncclCommAbort(kept->comm);
    return shared;
  }
  ncclConfig_t config = NonBlocking();
  world_.rank = layout_.rank;
  world_.size = layout_.size;
  // Old members keep their ranks (rank -1: from the parent); new ones are told theirs.
  const ncclResult_t rc =
      kept != nullptr
          ? calls.grow(kept->comm, layout_.size, layout_.rank == 0 ? &id : nullptr, -1,
                       &world_.comm, &config)
          : calls.grow(nullptr, layout_.size, &id, layout_.rank, &world_.comm, &config);
  Status s;
  if (rc != ncclSuccess && rc != ncclInProgress) {
    world_.comm = nullptr;
    s = Fail(NcclStatus(rc, kept != nullptr ? kept->comm : nullptr, "ncclCommGrow", __FILE__,
                        __LINE__));
  } else {
    s = Launched(rc, "ncclCommGrow", {&world_});
  }
  if (kept != nullptr) {
    ncclCommAbort(kept->comm);
    kept->comm = nullptr;
  }
  TFRING_RETURN_IF_ERROR(s);
  world_lineage_ = LineageOf(&id, sizeof(id));
  return Status::OK();
}

bool NcclExecutor::RevokeAndKeepWorld() {
  const NcclReshapeCalls& calls = ReshapeCalls();
  if (!world_leased_ || calls.revoke == nullptr || world_.comm == nullptr) return false;
  const ncclResult_t rc = calls.revoke(world_.comm, 0);
  // Revoked: in progress until its work has stopped, then ncclSuccess. An error instead
  // (NCCL's own word on the failure) leaves the communicator to be aborted.
  const auto deadline = std::chrono::steady_clock::now() + kRevokeDeadline;
  while (rc == ncclSuccess || rc == ncclInProgress) {
    ncclResult_t state = ncclInProgress;
    if (ncclCommGetAsyncError(world_.comm, &state) != ncclSuccess) break;
    if (state == ncclSuccess) {
      KeptWorld::MarkRevoked(this);
      world_.comm = nullptr;  // the slot owns it now
      return true;
    }
    if (state != ncclInProgress || std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return false;  // Fail() drops and aborts it
}

}  // namespace tfring
