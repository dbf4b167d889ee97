// NcclExecutor's lifecycle: device buffers, the stream ordering with TensorFlow's producers,
// waiting for completion with a deadline, and failure: an error or a collective past
// TFRING_PEER_TIMEOUT_SECONDS aborts the communicators and fails every later GPU op with
// the reason, announced to the peers first (core/failure_notice.h). The set-up at the
// first GPU collective is in nccl_bootstrap.cc, the collectives in nccl_executor.cc.
#include <sched.h>

#include <chrono>
#include <functional>
#include <thread>
#include <utility>

#include "tfring/kernels/backends/cuda/cuda_check.h"
#include "tfring/kernels/backends/nccl/nccl_check.h"
#include "tfring/kernels/backends/nccl/nccl_executor.h"
#include "tfring/kernels/common/logging.h"

namespace tfring {
namespace {

using Clock = std::chrono::steady_clock;

// Time spent spinning (yielding) on a completion before sleeping between polls: a small
// collective finishes within it, and a long one does not notice the short sleeps.
constexpr auto kSpin = std::chrono::microseconds(500);
constexpr auto kPollSleep = std::chrono::microseconds(20);
constexpr auto kDrainAfterAbort = std::chrono::seconds(5);
// How long a rank whose own collective failed listens for a peer's announcement before it
// announces its own: when the first failure was elsewhere, NCCL's error here (a closed
// connection, an aborted peer) is only its echo, and the peer's reason is the one to report.
// MPI's word that a peer died (ULFM) takes tens of milliseconds to arrive; NCCL's closed
// socket is quicker.
constexpr auto kListenBeforeAnnouncing = std::chrono::milliseconds(200);

}  // namespace

NcclExecutor::NcclExecutor(const Options& options, const ProcessLayout& layout,
                           std::unique_ptr<Backend> world, std::unique_ptr<Backend> local,
                           std::unique_ptr<Backend> cross, std::unique_ptr<FailureNotice> notice,
                           bool keep_world)
    : options_(options),
      layout_(layout),
      world_host_(std::move(world)),
      local_host_(std::move(local)),
      cross_host_(std::move(cross)),
      notice_(std::move(notice)),
      keep_world_(keep_world) {}

NcclExecutor::~NcclExecutor() {
  if (!ready_) return;
  cudaSetDevice(device_);
  // The world communicator stays for the next runtime (nccl_kept_world.h), or a newer one
  // already took it: not this executor's to free.
  const bool world_kept = world_leased_ && KeptWorld::Leave(this);
  if (broken_.ok()) {
    // Every call completed before it returned, so nothing is in flight. But a peer that has
    // died since (the job lost it in a host collective, and tfring is being started again
    // on the ranks left) would never take part in a destroy's finalization: abort, which
    // frees this rank's part alone.
    Status peer;
    const bool peer_gone = HeardFromPeer(std::chrono::milliseconds(0), &peer);
    for (Comm* c : {&world_, &local_}) {
      if (c->comm == nullptr || (c == &world_ && world_kept)) continue;
      peer_gone ? ncclCommAbort(c->comm) : ncclCommDestroy(c->comm);
    }
  }
  for (char* b : buffers_) {
    if (b) cudaFree(b);
  }
  if (done_event_) cudaEventDestroy(done_event_);
  if (producer_event_) cudaEventDestroy(producer_event_);
  if (inputs_event_) cudaEventDestroy(inputs_event_);
  if (stream_) cudaStreamDestroy(stream_);
}

bool NcclExecutor::HeardFromPeer(std::chrono::milliseconds grace, Status* reason) {
  if (notice_ == nullptr) return false;
  const auto deadline = Clock::now() + grace;
  Status failure;
  int from = -1;
  while (!notice_->Heard(&failure, &from)) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(kPollSleep);
  }
  *reason = failure;  // names the rank (FailureNotice::Heard)
  return true;
}

Status NcclExecutor::Fail(const Status& status) {
  if (broken_.ok()) {
    Status reason(status.code(),
                  status.message() + " (on rank " + std::to_string(layout_.rank) + ")");
    // Announce before aborting: the abort is what the peers' NCCL notices, and by then
    // they should already know why.
    if (notice_ != nullptr && !HeardFromPeer(kListenBeforeAnnouncing, &reason)) {
      notice_->Announce(reason);
    }
    // A communicator in an unknown state cannot be used again, and waiting on it could
    // hang: abort (ncclCommAbort does not wait for peers; it frees the communicator).
    // The one with work in flight goes first: freeing the other's device memory waits for
    // the whole device, and a kernel waiting for a peer's part ends only when its own
    // communicator is aborted (a hierarchical allreduce on `local_` failed on a peer would
    // otherwise hang in the abort of the idle `world_`).
    // Where NCCL can revoke, the world communicator is revoked instead (its work stopped as
    // an abort stops it) and kept for the next runtime to shrink (nccl_reshape.cc).
    Comm* order[2] = {&world_, &local_};
    if (in_flight_ == &local_) std::swap(order[0], order[1]);
    for (Comm* c : order) {
      if (c == &world_ && RevokeAndKeepWorld()) continue;
      if (c == &world_ && world_leased_) {
        KeptWorld::Drop(this);
        world_leased_ = false;
      }
      if (c->comm) ncclCommAbort(c->comm);
      c->comm = nullptr;
    }
    // Copies queued before the failure may still write the ops' outputs: give them a
    // bounded moment to drain before the ops complete and the framework reuses that memory.
    if (stream_ && done_event_ && cudaEventRecord(done_event_, stream_) == cudaSuccess) {
      const auto deadline = Clock::now() + kDrainAfterAbort;
      while (cudaEventQuery(done_event_) == cudaErrorNotReady && Clock::now() < deadline) {
        std::this_thread::sleep_for(kPollSleep);
      }
    }
    broken_ = Status(reason.code(), reason.message() +
                                        ". The NCCL communicators were stopped; GPU collectives "
                                        "fail from now on in this job (rank " +
                                        std::to_string(layout_.rank) + ")");
    TFRING_LOG(kError) << broken_.message();
  }
  return broken_;
}

Status NcclExecutor::Funnel(const Status& s) {
  // Failed through Fail() already (announced, communicators aborted): s carries its words,
  // with the op named where a caller added it.
  if (s.ok() || !broken_.ok()) return s;
  return Fail(s);
}

Status NcclExecutor::Launched(ncclResult_t rc, const char* call,
                              const std::vector<const Comm*>& comms) {
  if (rc != ncclSuccess && rc != ncclInProgress) {
    return Fail(NcclStatus(rc, comms.empty() ? nullptr : comms[0]->comm, call, __FILE__, __LINE__));
  }
  if (!comms.empty()) in_flight_ = comms[0];
  // Non-blocking communicators: the call may still be in progress on the host side (only
  // initialization takes long); the next call must wait for it. A peer's word or the
  // communicator's error that comes meanwhile (a peer that ended right after its part of
  // this very call, say) is for the stream's wait to judge (WaitForStream): the call was
  // launched, and may complete. A host side that never finishes fails here.
  for (const Comm* c : comms) {
    const Status s = WaitUntilDone(c->comm, call);
    if (s.code() == StatusCode::kDeadlineExceeded) return Fail(s);
    if (!s.ok()) break;
  }
  return Status::OK();
}

Status NcclExecutor::WaitUntilDone(ncclComm_t comm, const char* call) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(
                                               options_.peer_timeout_seconds));
  while (true) {
    Status peer;
    if (HeardFromPeer(std::chrono::milliseconds(0), &peer)) return peer;
    ncclResult_t state = ncclSuccess;
    const ncclResult_t q = ncclCommGetAsyncError(comm, &state);
    if (q != ncclSuccess) return NcclStatus(q, comm, "ncclCommGetAsyncError", __FILE__, __LINE__);
    if (state == ncclSuccess) return Status::OK();
    if (state != ncclInProgress) return NcclStatus(state, comm, call, __FILE__, __LINE__);
    if (Clock::now() > deadline) {
      return Status::DeadlineExceeded(
          std::string(call) + " did not finish within TFRING_PEER_TIMEOUT_SECONDS=" +
          std::to_string(options_.peer_timeout_seconds) + " s: a peer rank is missing or stopped");
    }
    std::this_thread::sleep_for(kPollSleep);
  }
}

Status NcclExecutor::WaitInputs(const std::vector<Entry*>& group) {
  for (const Entry* e : group) {
    if (e->ready_event != nullptr) {
      TFRING_CUDA_CHECK(cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(e->ready_event), 0));
    }
  }
  return MarkInputsReady();
}

Status NcclExecutor::MarkInputsReady() {
  TFRING_CUDA_CHECK(cudaEventRecord(inputs_event_, stream_));
  return Status::OK();
}

Status NcclExecutor::WaitForProducerStream(const Entry& e) {
  if (e.stream == nullptr) return Status::OK();
  TFRING_CUDA_CHECK(cudaEventRecord(producer_event_, static_cast<cudaStream_t>(e.stream)));
  TFRING_CUDA_CHECK(cudaStreamWaitEvent(stream_, producer_event_, 0));
  return Status::OK();
}

Status NcclExecutor::Complete(const std::string& what) {
  const Status s = WaitForStream(what);
  // A peer's reason (its announcement, its death) does not say which op this rank was in.
  if (s.ok() || s.message().find(what) != std::string::npos) return s;
  return Status(s.code(), what + " failed: " + s.message());
}

Status NcclExecutor::WaitForStream(const std::string& what) {
  TFRING_CUDA_CHECK(cudaEventRecord(done_event_, stream_));
  const auto called = Clock::now();
  const auto timeout = std::chrono::duration<double>(options_.peer_timeout_seconds);
  // The peer timeout counts from when the inputs are ready (MarkInputsReady): until then
  // this rank waits for its own GPU, however long its backlog of work.
  bool inputs_ready = false;
  auto start = called;
  while (true) {
    const cudaError_t rc = cudaEventQuery(done_event_);
    if (rc == cudaSuccess) return Status::OK();
    if (rc != cudaErrorNotReady) return Fail(CudaStatus(rc, "cudaEventQuery", __FILE__, __LINE__));
    if (!inputs_ready) {
      const cudaError_t inputs = cudaEventQuery(inputs_event_);
      if (inputs == cudaSuccess) {
        inputs_ready = true;
        start = Clock::now();
      } else if (inputs != cudaErrorNotReady) {
        return Fail(CudaStatus(inputs, "cudaEventQuery", __FILE__, __LINE__));
      }
    }
    // A peer's failure or death (MPI's word, or NCCL's through the communicator's error)
    // fails this op only if it cannot complete without that peer: one that ended right
    // after its part leaves this rank's collective complete, or about to be.
    Status peer;
    if (HeardFromPeer(std::chrono::milliseconds(0), &peer)) {
      if (StreamDoneWithin(kListenBeforeAnnouncing)) return Status::OK();
      return Fail(peer);
    }
    // The communicator this op's work runs on (the other one's error, a peer that ended
    // normally say, is not this op's), or both before any call.
    for (const Comm* c : {&world_, &local_}) {
      if (c->comm == nullptr || (in_flight_ != nullptr && c != in_flight_)) continue;
      ncclResult_t async = ncclSuccess;
      const ncclResult_t q = ncclCommGetAsyncError(c->comm, &async);
      if (q != ncclSuccess) {
        return Fail(NcclStatus(q, c->comm, "ncclCommGetAsyncError", __FILE__, __LINE__));
      }
      if (async != ncclSuccess && async != ncclInProgress) {
        if (StreamDoneWithin(kListenBeforeAnnouncing)) return Status::OK();
        return Fail(NcclStatus(async, c->comm, what.c_str(), __FILE__, __LINE__));
      }
    }
    if (inputs_ready && Clock::now() - start > timeout) {
      return Fail(Status::Aborted(
          what + " did not complete within TFRING_PEER_TIMEOUT_SECONDS=" +
          std::to_string(options_.peer_timeout_seconds) + " s of its inputs being ready on this "
          "rank: a peer rank died or stopped in the middle of it (or was still busy with "
          "earlier GPU work for that long)"));
    }
    if (Clock::now() - called < kSpin) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(kPollSleep);
    }
  }
}

bool NcclExecutor::StreamDoneWithin(std::chrono::milliseconds grace) {
  const auto deadline = Clock::now() + grace;
  while (true) {
    const cudaError_t rc = cudaEventQuery(done_event_);
    if (rc != cudaErrorNotReady) return rc == cudaSuccess;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(kPollSleep);
  }
}

Status NcclExecutor::DeviceBuffer(int which, int64_t bytes, char** buffer) {
  if (buffer_bytes_[which] < bytes) {
    // Only ever grows; every earlier call has completed, so the old buffer is idle.
    if (buffers_[which]) TFRING_CUDA_CHECK(cudaFree(buffers_[which]));
    buffers_[which] = nullptr;
    buffer_bytes_[which] = 0;
    const cudaError_t rc = cudaMalloc(reinterpret_cast<void**>(&buffers_[which]), bytes);
    if (rc != cudaSuccess) {
      buffers_[which] = nullptr;
      return Status::Internal(
          "allocating tfring's " + std::to_string(bytes) + "-byte GPU fusion buffer failed: " +
          cudaGetErrorString(rc) + ". NCCL and tfring's fusion buffers live outside "
          "TensorFlow's allocator: let TensorFlow grow its memory instead of taking it all "
          "(tf.config.experimental.set_memory_growth(gpu, True)), or lower "
          "TFRING_FUSION_THRESHOLD");
    }
    buffer_bytes_[which] = bytes;
  }
  *buffer = buffers_[which];
  return Status::OK();
}

Status NcclExecutor::CopyAsync(void* dst, const void* src, int64_t bytes) {
  if (bytes == 0 || dst == src) return Status::OK();
  TFRING_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
  return Status::OK();
}

Status NcclExecutor::ThroughHost(void* device_buffer, int64_t bytes, const std::string& why,
                                 const std::function<Status(char* host)>& fn) {
  if (bytes == 0) return Status::OK();
  host_staging_.resize(bytes);
  // A copy into pageable host memory returns only once it has completed, so it would wait,
  // unwatched, for the collective queued before it: a peer lost in that collective would
  // leave this thread there for ever, never aborting. That collective is waited for first,
  // watched (the peers' notices, the peer timeout).
  TFRING_RETURN_IF_ERROR(Complete("the NCCL collective before copying to the host to " + why));
  TFRING_CUDA_CHECK(cudaMemcpyAsync(host_staging_.data(), device_buffer, bytes,
                                    cudaMemcpyDeviceToHost, stream_));
  TFRING_RETURN_IF_ERROR(Complete("copying a tensor to the host to " + why));
  TFRING_RETURN_IF_ERROR(fn(host_staging_.data()));
  TFRING_CUDA_CHECK(cudaMemcpyAsync(device_buffer, host_staging_.data(), bytes,
                                    cudaMemcpyHostToDevice, stream_));
  // host_staging_ must outlive the copy: every later use of it follows a Complete().
  return Status::OK();
}

}  // namespace tfring
