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
#include "tfring/kernels/backends/nccl/nccl_library.h"
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
  ReshapePlan::Kind made = plan.kind;
  std::string why = plan.why;
  if (plan.kind == ReshapePlan::Kind::kKeep) {
    world_.comm = kept->comm;
    world_.rank = layout_.rank;
    world_.size = layout_.size;
    world_lineage_ = kept->lineage;
  } else if (plan.kind != ReshapePlan::Kind::kMakeNew) {
    const Status mine = plan.kind == ReshapePlan::Kind::kShrink
                            ? ShrinkWorld(kept, plan.excluded)
                            : GrowWorld(kept);
    // A shrink or grow that failed anywhere (NCCL's error, a peer that did not take part)
    // leaves every rank to make one anew, rather than the job without GPU collectives.
    bool everywhere = false;
    TFRING_RETURN_IF_ERROR(AllRanks(mine.ok(), &everywhere));
    if (!everywhere) {
      why = std::string(ReshapeKindName(plan.kind)) + " failed " +
            (mine.ok() ? "on another rank" : "here: " + mine.message());
      TFRING_LOG(kWarning) << "NCCL's world communicator could not be reused (" << why
                           << "); making a new one";
      if (world_.comm != nullptr) ncclCommAbort(world_.comm);
      world_.comm = nullptr;
      made = ReshapePlan::Kind::kMakeNew;
    }
  } else if (kept != nullptr) {
    ncclCommAbort(kept->comm);  // local: frees this rank's part alone
  }
  if (made == ReshapePlan::Kind::kMakeNew) {
    TFRING_RETURN_IF_ERROR(InitComm(world_host_.get(), layout_.rank, layout_.size, "world",
                                    &world_, &world_lineage_));
  }
  const std::string how = ReshapeKindName(made);
  KeptWorld::NoteMade(how);
  TFRING_LOG(kDebug) << "NCCL world communicator " << how << ": rank " << world_.rank << " of "
                     << world_.size << " on GPU " << device_
                     << (why.empty() ? "" : " (" + why + ")");
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

Status NcclExecutor::AllRanks(bool ok, bool* all) {
  const int32_t mine = ok ? 1 : 0;
  std::vector<int32_t> every(layout_.size, 0);
  const Status s = world_host_->Allgather(&mine, every.data(),
                                          std::vector<int64_t>(layout_.size, sizeof(int32_t)));
  if (!s.ok()) {
    return Fail(Status(s.code(), "agreeing through MPI on NCCL's world communicator: " +
                                     s.message()));
  }
  *all = true;
  for (int32_t v : every) *all = *all && v == 1;
  return Status::OK();
}

Status NcclExecutor::ShrinkWorld(KeptComm* kept, const std::vector<int32_t>& excluded) {
  std::vector<int> leave(excluded.begin(), excluded.end());
  ncclConfig_t config = NonBlocking();
  // A revoked parent has stopped its work; one kept after a lost peer between collectives
  // may still have NCCL's own threads waiting on that peer: stop them first.
  const int flags = kept->revoked ? kNcclShrinkDefault : kNcclShrinkAbort;
  // NCCL runs a non-blocking shrink as a job of the parent: the parent reports its progress,
  // and `child` is written when the job ends.
  ncclComm_t child = nullptr;
  const ncclResult_t rc = ReshapeCalls().shrink(kept->comm, leave.data(),
                                                static_cast<int>(leave.size()), &child,
                                                &config, flags);
  Status s = rc == ncclSuccess || rc == ncclInProgress
                 ? WaitUntilDone(kept->comm, "ncclCommShrink")
                 : NcclStatus(rc, kept->comm, "ncclCommShrink", __FILE__, __LINE__);
  // The parent goes first: its abort ends a shrink job still running (and waits for it), so
  // `child` is final after it. NCCL leaves the parent's resources to the caller.
  ncclCommAbort(kept->comm);
  kept->comm = nullptr;
  if (s.ok() && child == nullptr) s = Status::Internal("ncclCommShrink made no communicator");
  if (s.ok()) s = WaitUntilDone(child, "ncclCommShrink");
  if (!s.ok()) {
    if (child != nullptr) ncclCommAbort(child);
    return s;
  }
  world_.comm = child;
  world_.rank = layout_.rank;  // the survivors in their old order (PlanReshape checked it)
  world_.size = layout_.size;
  world_lineage_ = DerivedLineage(kept->lineage, excluded, layout_.size);
  return Status::OK();
}

Status NcclExecutor::GrowWorld(KeptComm* kept) {
  const NcclReshapeCalls& calls = ReshapeCalls();
  // The old rank 0 (the new one too: old ranks come first) makes the id from its
  // communicator; the new ranks get it through MPI, with everyone else.
  ncclUniqueId id;
  Status s = ShareId(
      world_host_.get(), layout_.rank, "grown world",
      [&](ncclUniqueId* out) { return calls.unique_id_for_grow(kept->comm, out); }, &id);
  ncclComm_t child = nullptr;
  if (s.ok()) {
    ncclConfig_t config = NonBlocking();
    // Old members keep their ranks (rank -1: from the parent); new ones are told theirs.
    // Unlike a shrink, the new communicator reports the grow's progress itself.
    const ncclResult_t rc =
        kept != nullptr
            ? calls.grow(kept->comm, layout_.size, layout_.rank == 0 ? &id : nullptr, -1, &child,
                         &config)
            : calls.grow(nullptr, layout_.size, &id, layout_.rank, &child, &config);
    if (rc != ncclSuccess && rc != ncclInProgress) {
      s = NcclStatus(rc, kept != nullptr ? kept->comm : nullptr, "ncclCommGrow", __FILE__,
                     __LINE__);
    } else if (child == nullptr) {
      s = Status::Internal("ncclCommGrow made no communicator");
    } else {
      s = WaitUntilDone(child, "ncclCommGrow");
    }
  }
  // Unlike a shrink's, a grow's job belongs to the child and talks through the parent's
  // bootstrap until it ends: where it failed, the child's abort (which ends the job and
  // waits for it) must come before the parent's, or the job would use a freed parent.
  if (!s.ok() && child != nullptr) ncclCommAbort(child);
  if (kept != nullptr) {
    ncclCommAbort(kept->comm);
    kept->comm = nullptr;
  }
  if (!s.ok()) return s;
  world_.comm = child;
  world_.rank = layout_.rank;
  world_.size = layout_.size;
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
    if (state != ncclInProgress) break;
    if (std::chrono::steady_clock::now() > deadline) {
      // Its work has not stopped. An abort now would wait for the revoke (NCCL joins it) and
      // could hang the same way: leave the communicator as it is, used by nobody.
      TFRING_LOG(kWarning) << "NCCL's world communicator did not stop within "
                           << kRevokeDeadline.count() << " s of its revoke; left as it is";
      KeptWorld::Drop(this);
      world_.comm = nullptr;
      return true;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return false;  // Fail() drops and aborts it
}

}  // namespace tfring
