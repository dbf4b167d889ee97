// NcclExecutor: fusion groups of GPU tensors through NCCL, on device buffers.
//
// Ordering with the framework (docs/architecture.md): before it reads a group, the executor's stream
// waits for each entry's ready event (recorded by the op on its producer's stream); a call
// returns only once its work on the executor's stream has completed, so when the coordinator
// then completes the ops, every consumer (on any stream) sees finished results. It polls an
// event for that (never a device-wide synchronize), checking NCCL's asynchronous errors while
// it waits: a NCCL error, or a collective that has not finished after
// TFRING_PEER_TIMEOUT_SECONDS (a peer died mid-collective), aborts the communicators and
// fails this and every later GPU op with the reason, instead of hanging. A rank that fails
// first announces it (core/failure_notice.h) before it aborts, and every rank polls for
// announcements while it waits, so its peers fail the same op within milliseconds with the
// failing rank's reason instead of waiting out the timeout; host collectives and the control
// plane go on. Every error of a call, once the ranks have agreed to run its group, takes
// that one way (Funnel): an allocation, a CUDA call, a device mismatch fails the group on
// every rank at once, never only here while the peers wait in NCCL. The timeout counts from
// when the group's inputs are ready (this rank's own backlog of GPU work does not count):
// it measures the wait on the peers, a peer that died, stopped, or is itself still busy
// with earlier GPU work for that long. The hierarchical allreduce's MPI step across hosts
// is a blocking MPI call, as host tensors' collectives are.
//
// Memory: the fusion buffers are cudaMalloc'ed (as NCCL's own buffers are), outside
// TensorFlow's allocator; TensorFlow must be left room (memory growth, as with Horovod).
//
// Communicators are created on the first GPU tensor, once: one over all ranks, and with
// TFRING_HIERARCHICAL_ALLREDUCE=1 one over this host's ranks. First every rank says over MPI
// whether it could set its GPU up and which GPU it is (host and PCI bus id): a rank that
// could not, or two ranks on one GPU (NCCL refuses them), fail every rank with one message
// that names the ranks. Rank 0 (the host's first rank) makes the unique id, and the id
// travels through MPI with rank 0's status, so a failure there fails every rank too.
// Non-blocking NCCL communicators, so that initialization too can time out.
//
// Elastic resets: the global runtime's executor (keep_world) leaves its world communicator
// to the next runtime (nccl_kept_world.h). The next one's set-up exchanges, with the GPU
// claims, what each rank kept, and keeps it as it is, shrinks it (ranks lost or left) or grows
// it (ranks joined) where this NCCL has the calls, else makes one anew. After a failure, where
// NCCL has ncclCommRevoke, the world communicator is revoked (its work stopped, kept for a
// shrink) instead of aborted.
//
// Allreduce: Average and the scale factors of floating-point tensors are folded into the
// reduction (NCCL's PreMulSum op, one factor pre*post/size), so the common case is one NCCL
// call and no extra pass over the data. The rare rest (prescale with Min/Max/Product, an
// integer Average's division, integer scale factors) round-trips through host memory:
// correct, not fast.
// Allgather with uneven first dimensions is one broadcast per rank, in one NCCL group.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tfring/kernels/backends/cuda/batched_copy.h"
#include "tfring/kernels/backends/nccl/nccl_kept_world.h"
#include "tfring/kernels/common/options.h"
#include "tfring/kernels/core/backend.h"
#include "tfring/kernels/core/buffer_layout.h"
#include "tfring/kernels/core/communicator_reshape.h"
#include "tfring/kernels/core/failure_notice.h"
#include "tfring/kernels/core/group_executor.h"
#include "tfring/kernels/core/process_layout.h"

namespace tfring {

class NcclExecutor : public GroupExecutor {
 public:
  // `world`, `local` (this host's ranks) and `cross` (the ranks sharing this local rank):
  // host backends, used to share NCCL's unique ids and, for hierarchical allreduce, for
  // the step across hosts. `notice` spans the ranks of `world` (null: a failure is not
  // announced, and peers find out from NCCL or their timeout). `keep_world`: this is the
  // runtime's world executor (not a process set's), whose world communicator the next runtime
  // may keep, shrink or grow (unless options.nccl_reshape_off). Nothing touches CUDA until
  // the first GPU tensor arrives.
  NcclExecutor(const Options& options, const ProcessLayout& layout, std::unique_ptr<Backend> world,
               std::unique_ptr<Backend> local, std::unique_ptr<Backend> cross,
               std::unique_ptr<FailureNotice> notice, bool keep_world = false);
  ~NcclExecutor() override;

  const char* name() const override { return "NCCL"; }
  Status Allreduce(const std::vector<Entry*>& group, const Response& r) override {
    return Funnel(RunAllreduce(group, r));
  }
  Status Allgather(const std::vector<Entry*>& group,
                   const std::vector<const Response*>& rs) override {
    return Funnel(RunAllgather(group, rs));
  }
  Status Broadcast(const std::vector<Entry*>& group, const Response& r) override {
    return Funnel(RunBroadcast(group, r));
  }
  Status Reducescatter(const std::vector<Entry*>& group, const Response& r) override {
    return Funnel(RunReducescatter(group, r));
  }
  Status Alltoall(const std::vector<Entry*>& group, const Response& r) override {
    return Funnel(RunAlltoall(group, r));
  }

 private:
  struct Comm {
    ncclComm_t comm = nullptr;
    int rank = 0, size = 1;
  };
  // How an allreduce maps onto NCCL (see the header comment).
  struct Reduction {
    ncclRedOp_t op = ncclSum;
    bool premulsum = false;       // op was created by ncclRedOpCreatePreMulSum
    ReduceOp host_op = ReduceOp::kSum;  // the same reduction, for MPI across hosts
    double prescale_on_host = 1.0;
    double postscale_on_host = 1.0;
    bool divide_on_host = false;
  };

  Status RunAllreduce(const std::vector<Entry*>& group, const Response& r);
  Status RunAllgather(const std::vector<Entry*>& group, const std::vector<const Response*>& rs);
  Status RunBroadcast(const std::vector<Entry*>& group, const Response& r);
  Status RunReducescatter(const std::vector<Entry*>& group, const Response& r);
  Status RunAlltoall(const std::vector<Entry*>& group, const Response& r);
  // The one way out of a collective: an error not yet announced goes through Fail().
  Status Funnel(const Status& s);

  Status EnsureReady(const std::vector<Entry*>& group);
  // Streams and events on `device` (this rank's part of the set-up; no peer involved).
  Status SetUpDevice(int device);
  // Every rank's word on its set-up (`local`), its GPU and what it kept (`kept`), over the
  // world's host backend: fails on every rank alike if any rank's set-up failed or two ranks
  // share a GPU; else *claims holds every rank's KeptClaim.
  Status AgreeOnGpus(const Status& local, const KeptClaim& kept, std::vector<KeptClaim>* claims);
  // The world communicator, from the kept one (null: this rank kept none) as the plan says.
  Status MakeWorld(KeptComm* kept, const std::vector<KeptClaim>& claims);
  // Each leaves the kept communicator freed and, where it fails, world_ empty (no Fail:
  // MakeWorld then makes one anew on every rank).
  Status ShrinkWorld(KeptComm* kept, const std::vector<int32_t>& excluded);
  Status GrowWorld(KeptComm* kept);
  // Rank 0 of `bootstrap` makes an id with `make`; every rank gets it, or rank 0's error
  // (every rank alike; no Fail: the caller decides).
  Status ShareId(Backend* bootstrap, int rank, const std::string& what,
                 const std::function<ncclResult_t(ncclUniqueId*)>& make, ncclUniqueId* id);
  Status InitComm(Backend* bootstrap, int rank, int size, const char* what, Comm* comm,
                  uint64_t* lineage);
  // After a failure: revokes the world communicator, waits until its work has stopped, and
  // leaves it kept for a shrink. False where that cannot be done (then it is to be aborted);
  // true too where the revoke never finished (the communicator is left alone: an abort would
  // wait for the revoke).
  bool RevokeAndKeepWorld();
  // Waits while a non-blocking communicator finishes the call that returned `rc`; fails
  // (Fail) if it does not.
  Status Launched(ncclResult_t rc, const char* call, const std::vector<const Comm*>& comms);
  // Waits until `comm` is no longer in progress with `call`: its error, a peer's announced
  // failure, or the peer timeout otherwise. Breaks nothing: the caller decides.
  Status WaitUntilDone(ncclComm_t comm, const char* call);
  // Whether `ok` holds on every rank of the world (over MPI); fails where MPI does.
  Status AllRanks(bool ok, bool* all);
  Status WaitInputs(const std::vector<Entry*>& group);
  Status WaitForProducerStream(const Entry& e);
  // Marks, on the executor's stream, the point where the group's inputs are ready: the
  // peer timeout counts from there (WaitForStream).
  Status MarkInputsReady();
  // Waits until everything queued on the executor's stream has finished. A failure's
  // words name `what` (the op and its tensors), whichever rank's reason they carry.
  Status Complete(const std::string& what);
  Status WaitForStream(const std::string& what);
  // Whether the work recorded by WaitForStream's event completes within `grace`.
  bool StreamDoneWithin(std::chrono::milliseconds grace);
  // Breaks the executor for good: announces `status` to the peers (unless a peer's
  // announcement came first, whose reason then wins), aborts the communicators.
  Status Fail(const Status& status);
  // Whether a peer announced a failure, or died: *reason says which rank and why. Polls for up to
  // `grace` for one to arrive.
  bool HeardFromPeer(std::chrono::milliseconds grace, Status* reason);
  // The hierarchical allreduce's step across hosts, among the hosts' first ranks. Each
  // takes part even when its own host's reduce (`local`) failed, so that none waits in MPI
  // for it: they first agree whether every host's reduce succeeded.
  Status AcrossHosts(void* buffer, int64_t bytes, int64_t count, DataType dtype, ReduceOp op,
                     Status local);
  Status DeviceBuffer(int which, int64_t bytes, char** buffer);
  Status CopyAsync(void* dst, const void* src, int64_t bytes);
  // A fusion buffer packed from the group's inputs, and unpacked into its outputs, with
  // batched copies (backends/cuda/batched_copy.h).
  Status PackInputs(const std::vector<Entry*>& group, const Packed& packed, char* buffer);
  Status UnpackOutputs(const std::vector<Entry*>& group, const Packed& packed, const char* buffer);
  Status PlanReduction(const Response& r, const Comm& comm, Reduction* plan);
  // Copies `bytes` of device memory to the host (after the work queued so far), runs `fn`
  // on them there, and queues the copy back. The slow path for what NCCL cannot do.
  Status ThroughHost(void* device_buffer, int64_t bytes, const std::string& why,
                     const std::function<Status(char* host)>& fn);
  Status ReduceBuffer(const void* in, void* out, int64_t count, DataType dtype, const Response& r);
  Status GatherV(const void* in, void* out, const std::vector<int64_t>& bytes_per_rank);

  const Options options_;
  const ProcessLayout layout_;
  std::unique_ptr<Backend> world_host_, local_host_, cross_host_;
  std::unique_ptr<FailureNotice> notice_;
  const bool keep_world_;  // leases its world communicator to the next runtime
  uint64_t world_lineage_ = 0;
  bool world_leased_ = false;  // KeptWorld holds world_ for the next runtime
  bool ready_ = false;
  Status broken_;  // set once a communicator is aborted: every later call fails with it
  int device_ = -1;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t done_event_ = nullptr;
  cudaEvent_t producer_event_ = nullptr;
  cudaEvent_t inputs_event_ = nullptr;
  BatchedCopier copier_;
  Comm world_, local_;
  const Comm* in_flight_ = nullptr;  // the communicator of the last call launched
  char* buffers_[2] = {nullptr, nullptr};
  int64_t buffer_bytes_[2] = {0, 0};
  std::vector<char> host_staging_;
};

}  // namespace tfring
