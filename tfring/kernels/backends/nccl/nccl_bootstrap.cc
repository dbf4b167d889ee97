// NcclExecutor's set-up, at the first GPU collective: this rank's stream and events, then
// every rank's word on its set-up and its GPU (one MPI allgather), then the communicators,
// each from a unique id that its rank 0 makes and broadcasts with its status.
//
// Why the agreement: each step that can fail on one rank (a CUDA call, NCCL's unique id) is
// followed by a collective the others are already blocked in (MPI, or NCCL's init). Every
// rank reaches each exchange whatever happened to it, with its status in the message, so a
// failure anywhere fails every rank at once with the failing rank's words, never a peer
// left in MPI_Bcast for ever. The same exchange finds two ranks on one GPU, which NCCL
// refuses with a message ("Duplicate GPU detected") that says nothing of pinning.
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tfring/kernels/backends/cuda/cuda_check.h"
#include "tfring/kernels/backends/nccl/nccl_check.h"
#include "tfring/kernels/backends/nccl/nccl_executor.h"
#include "tfring/kernels/backends/nccl/nccl_library.h"
#include "tfring/kernels/common/logging.h"

namespace tfring {
namespace {

// What each rank tells the others about its GPU and the world communicator its last runtime
// kept: fixed-size, so one allgather carries it.
struct GpuClaim {
  int32_t failed = 0;
  KeptClaim kept;
  // NCCL tells hosts apart by NCCL_HOSTID where set (the native tests give ranks that share
  // one GPU a host each), else by the host's name: so does this check.
  char host[128] = {};
  char bus_id[64] = {};  // the GPU's PCI bus id: the same physical GPU whatever CUDA calls it
  int32_t device = -1;   // CUDA's ordinal in this process (for messages)
  char reason[512] = {};
};

// Whether a communicator the last runtime kept can be shrunk or grown: NCCL reports an error
// a peer's loss left in it (its proxy thread saw it, say) only once a call is made, and a
// shrink over it would fail at once here while the other ranks waited out their peer
// timeout in theirs. Not claimed, it makes every rank plan a new one at once.
bool Healthy(ncclComm_t comm) {
  ncclResult_t state = ncclInternalError;
  if (ncclCommGetAsyncError(comm, &state) == ncclSuccess && state == ncclSuccess) return true;
  TFRING_LOG(kDebug) << "NCCL's kept world communicator reports " << ncclGetErrorString(state)
                     << "; not reused";
  return false;
}

// A unique id with its maker's status.
struct SharedId {
  int32_t failed = 0;
  char reason[512] = {};
  ncclUniqueId id;
};

void CopyText(const std::string& text, char* to, size_t size) {
  std::strncpy(to, text.c_str(), size - 1);
  to[size - 1] = '\0';
}

std::string HostKey() {
  const char* hostid = std::getenv("NCCL_HOSTID");
  if (hostid != nullptr && *hostid != '\0') return std::string("NCCL_HOSTID=") + hostid;
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

}  // namespace

Status NcclExecutor::EnsureReady(const std::vector<Entry*>& group) {
  if (!broken_.ok()) return broken_;
  // A peer that failed an earlier collective after its own part of it was done (so this
  // rank's completed) has announced it: fail here rather than start one it will not join.
  Status peer;
  if (HeardFromPeer(std::chrono::milliseconds(0), &peer)) return Fail(peer);
  const int device = group[0]->device;
  Status local;
  for (const Entry* e : group) {
    if (e->device != device) {
      local = Status::InvalidArgument(
          "tensors of one process are on GPUs " + std::to_string(device) + " and " +
          std::to_string(e->device) + " ('" + e->request.name + "'): tfring uses one GPU per "
          "process; pin each rank to its GPU (tfring.pin_gpu())");
      break;
    }
  }
  if (ready_) {
    if (local.ok() && device != device_) {
      local = Status::InvalidArgument(
          "tensor '" + group[0]->request.name + "' is on GPU " + std::to_string(device) +
          ", but this process's NCCL communicator was created on GPU " + std::to_string(device_) +
          ": tfring uses one GPU per process; pin each rank to its GPU (tfring.pin_gpu())");
    }
    TFRING_RETURN_IF_ERROR(local);
    TFRING_CUDA_CHECK(cudaSetDevice(device_));
    return Status::OK();
  }
  device_ = device;
  ready_ = true;  // the destructor frees what exists from here on
  if (local.ok()) local = SetUpDevice(device);
  // The world communicator the last runtime left (an elastic reset), usable on this GPU.
  KeptComm kept;
  bool have_kept = keep_world_ && !options_.nccl_reshape_off && KeptWorld::Take(&kept);
  if (have_kept && (kept.device != device || !Healthy(kept.comm))) {
    ncclCommAbort(kept.comm);
    have_kept = false;
  }
  KeptClaim mine;
  if (have_kept) {
    mine.kept = true;
    mine.lineage = kept.lineage;
    mine.rank = kept.rank;
    mine.size = kept.size;
    mine.revoked = kept.revoked;
  }
  mine.can_shrink = ReshapeCalls().shrink != nullptr;
  mine.can_grow = ReshapeCalls().grow != nullptr;
  // Every rank takes part in the agreement, whatever happened here.
  std::vector<KeptClaim> claims;
  const Status agreed = AgreeOnGpus(local, mine, &claims);
  if (!agreed.ok()) {
    if (have_kept) ncclCommAbort(kept.comm);
    return agreed;
  }
  TFRING_RETURN_IF_ERROR(MakeWorld(have_kept ? &kept : nullptr, claims));
  if (options_.hierarchical_allreduce) {
    TFRING_RETURN_IF_ERROR(InitComm(local_host_.get(), layout_.local_rank, layout_.local_size,
                                    "local", &local_, nullptr));
  }
  return Status::OK();
}

Status NcclExecutor::SetUpDevice(int device) {
  TFRING_CUDA_CHECK(cudaSetDevice(device));
  TFRING_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  TFRING_CUDA_CHECK(cudaEventCreateWithFlags(&done_event_, cudaEventDisableTiming));
  TFRING_CUDA_CHECK(cudaEventCreateWithFlags(&producer_event_, cudaEventDisableTiming));
  TFRING_CUDA_CHECK(cudaEventCreateWithFlags(&inputs_event_, cudaEventDisableTiming));
  copier_.Load();  // on this thread, with this device current: the kernel's context
  return Status::OK();
}

Status NcclExecutor::AgreeOnGpus(const Status& local, const KeptClaim& kept,
                                 std::vector<KeptClaim>* claims) {
  GpuClaim mine;
  mine.kept = kept;
  mine.device = device_;
  CopyText(HostKey(), mine.host, sizeof(mine.host));
  Status here = local;
  if (here.ok()) {
    const cudaError_t rc = cudaDeviceGetPCIBusId(mine.bus_id, sizeof(mine.bus_id), device_);
    if (rc != cudaSuccess) here = CudaStatus(rc, "cudaDeviceGetPCIBusId", __FILE__, __LINE__);
  }
  mine.failed = here.ok() ? 0 : 1;
  CopyText(here.message(), mine.reason, sizeof(mine.reason));
  std::vector<GpuClaim> all(layout_.size);
  const Status exchanged = world_host_->Allgather(
      &mine, all.data(), std::vector<int64_t>(layout_.size, sizeof(GpuClaim)));
  if (!exchanged.ok()) {
    return Fail(Status(exchanged.code(), "telling the other ranks which GPU this rank uses, "
                                         "through MPI: " + exchanged.message()));
  }
  for (int r = 0; r < layout_.size; ++r) {
    if (all[r].failed) {
      return Fail(Status::Internal("rank " + std::to_string(r) + " could not set up GPU " +
                                   std::to_string(all[r].device) + " for NCCL: " +
                                   all[r].reason));
    }
  }
  for (int a = 0; a < layout_.size; ++a) {
    for (int b = a + 1; b < layout_.size; ++b) {
      if (std::strcmp(all[a].host, all[b].host) == 0 &&
          std::strcmp(all[a].bus_id, all[b].bus_id) == 0) {
        return Fail(Status::FailedPrecondition(
            "ranks " + std::to_string(a) + " and " + std::to_string(b) + " both use the GPU at "
            "PCI " + all[a].bus_id + " on host " + all[a].host + ": NCCL takes one GPU per "
            "process. Pin each rank to its own GPU before its first TensorFlow op: "
            "tfring.pin_gpu() right after tfring.init(), or Horovod's lines "
            "(tf.config.set_visible_devices(gpus[hvd.local_rank()], 'GPU')), or a launcher "
            "that gives each rank its own CUDA_VISIBLE_DEVICES"));
      }
    }
  }
  claims->clear();
  for (const GpuClaim& c : all) claims->push_back(c.kept);
  return Status::OK();
}

Status NcclExecutor::ShareId(Backend* bootstrap, int rank, const std::string& what,
                             const std::function<ncclResult_t(ncclUniqueId*)>& make,
                             ncclUniqueId* id) {
  SharedId shared;
  std::memset(&shared.id, 0, sizeof(shared.id));
  if (rank == 0) {
    const ncclResult_t rc = make(&shared.id);
    if (rc != ncclSuccess) {
      shared.failed = 1;
      CopyText(NcclStatus(rc, nullptr, "making NCCL's unique id", __FILE__, __LINE__).message(),
               shared.reason, sizeof(shared.reason));
    }
  }
  // Rank 0 broadcasts whether or not it has an id: its peers are already waiting for it.
  const Status sent = bootstrap->Broadcast(&shared, sizeof(shared), 0);
  if (!sent.ok()) {
    return Status(sent.code(), "sharing the NCCL unique id of the " + what +
                                   " communicator through MPI: " + sent.message());
  }
  if (shared.failed) {
    return Status::Internal("the " + what + " communicator's first rank could not make "
                            "NCCL's unique id: " + shared.reason);
  }
  *id = shared.id;
  return Status::OK();
}

Status NcclExecutor::InitComm(Backend* bootstrap, int rank, int size, const char* what,
                              Comm* comm, uint64_t* lineage) {
  ncclUniqueId id;
  const Status shared = ShareId(bootstrap, rank, what, &ncclGetUniqueId, &id);
  if (!shared.ok()) return Fail(shared);
  if (lineage != nullptr) *lineage = LineageOf(&id, sizeof(id));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  comm->rank = rank;
  comm->size = size;
  const ncclResult_t rc = ncclCommInitRankConfig(&comm->comm, size, id, rank, &config);
  if (rc != ncclSuccess && rc != ncclInProgress) {
    comm->comm = nullptr;
    return Fail(NcclStatus(rc, nullptr, "ncclCommInitRankConfig", __FILE__, __LINE__));
  }
  TFRING_RETURN_IF_ERROR(Launched(rc, "ncclCommInitRankConfig", {comm}));
  TFRING_LOG(kDebug) << "NCCL " << what << " communicator ready: rank " << rank << " of " << size
                     << " on GPU " << device_;
  return Status::OK();
}

}  // namespace tfring
