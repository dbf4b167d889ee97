// The host GPU's NCCL communicator (host_gpu.h): one Unix socket to each peer, found by the
// name the unique id carries, and a thread per peer that reads whatever the peer sends into
// a queue. A send's data goes out at once, but the call (a collective, a group, a lone
// send) ends only once each peer's matching receive took it (WaitForAcks): point-to-point
// and rooted collectives rendezvous, as NCCL's kernels do, so that a send outside a group
// whose peer sends first deadlocks here too.
// Messages between two ranks arrive in the order sent, and every rank runs a
// communicator's collectives in the same order, so the next message from a peer is always
// the one the current collective expects (checked).
#pragma once

#include <nccl.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace host_gpu {

struct Message {
  uint32_t kind = 0;
  std::vector<char> bytes;
};

// What Send and Receive return when the peer is gone: the collective waits until the
// communicator is aborted or revoked. A peer on the same host (NCCL_HOSTID, else the host's
// name) is lost silently, as NCCL over NVLink or shared memory says nothing; one on another
// host makes the communicator report ncclRemoteError (ncclCommGetAsyncError) as soon as its
// connection closes, as NCCL's network transport and proxy do, idle or not.
constexpr ncclResult_t kLost = static_cast<ncclResult_t>(-1);

class CommState : public std::enable_shared_from_this<CommState> {
 public:
  CommState(int rank, int size, const ncclUniqueId& id) : rank_(rank), size_(size), id_(id) {}
  ~CommState();

  int rank() const { return rank_; }
  int size() const { return size_; }
  const ncclUniqueId& id() const { return id_; }
  // A grown communicator's id, once its root has sent it (before Connect).
  void set_id(const ncclUniqueId& id) { id_ = id; }

  // Connects to every peer (a rendezvous through the id's socket names); ncclSuccess or the
  // error, with last_error() saying why.
  ncclResult_t Connect();
  // Sends `bytes` to `peer` (itself too), tagged with `kind` (the collective); kLost where
  // the peer is gone.
  ncclResult_t Send(int peer, uint32_t kind, const void* data, size_t bytes);
  // Receives the next message from `peer`, which must be of `kind` and `bytes` long; kLost
  // where the peer is gone. Tells the peer it was taken (its WaitForAcks).
  ncclResult_t Receive(int peer, uint32_t kind, void* data, size_t bytes);
  // Waits until every peer took what this rank sent it: ncclSuccess; kLost where a peer is
  // gone; ncclInvalidUsage once aborted or revoked.
  ncclResult_t WaitForAcks();
  // Receives the next message of `kind` from `peer`, dropping any other (what a revoked or
  // idle collective left), until `stop` is set: a grow's id, through its parent.
  ncclResult_t ReceiveControl(int peer, uint32_t kind, void* data, size_t bytes,
                              const CommState& stop);

  // A call launched on a non-blocking communicator: ncclInProgress for a moment, as NCCL's
  // host side of the launch.
  void Launched();
  bool nonblocking() const { return nonblocking_; }
  void set_nonblocking(bool value) { nonblocking_ = value; }
  // ncclInProgress while connecting or launching; then ncclSuccess, or the first error.
  ncclResult_t async_error() const { return async_error_.load(); }
  void set_async_error(ncclResult_t rc) { async_error_.store(rc); }
  std::string last_error();
  // Fails the communicator with `rc` (its async error, and `why` as its last error), as NCCL
  // reports a failure of its own: the reshaping calls' faults (host_nccl_reshape.cc).
  ncclResult_t FailOnPurpose(ncclResult_t rc, const std::string& why) { return Fail(rc, why); }
  // A revoke that never ends: ncclInProgress for ever (TFRING_HOST_GPU_RESHAPE_FAULT).
  void RevokeWithoutEnd();
  // Makes waiting receives (and a connection under way) give up; Abort then ends the rest.
  void MarkAborted();
  // Blocks until the communicator is aborted or destroyed: what a collective's kernel does
  // once a peer is lost (it spins until ncclCommAbort), so the stream never completes a
  // collective that failed.
  void WaitUntilAborted();
  // ncclCommRevoke: the collectives in flight stop (their streams go on) and no other may
  // start; ncclInProgress for a moment, then quiescent (ncclSuccess), kept for a shrink.
  void Revoke();
  bool revoked() const { return revoked_.load(); }
  // Collectives queued on a stream and not yet at their end (Launch queues, RunAll ends):
  // ncclCommDestroy waits for them, as NCCL's does. WaitForQueued returns false after
  // `seconds` with some still queued: a collective whose peer is lost, for which NCCL's
  // destroy would wait for ever.
  void Queue();
  void Ran();
  bool WaitForQueued(double seconds);
  // Stops everything: waiting receives and sends fail, the readers end. Idempotent. Not
  // while Connect runs on another thread (ncclCommAbort waits for it first).
  void Abort();
  bool aborted() const { return aborted_.load(); }

 private:
  struct Peer {
    int fd = -1;
    std::thread reader;
    std::deque<Message> inbox;
    bool closed = false;   // the peer closed its end (it died, aborted or destroyed)
    std::string host;      // its NCCL_HOSTID, else its host's name (exchanged in Connect)
    uint64_t sent = 0;     // messages sent to it, and how many of them it took (under mu_)
    uint64_t taken = 0;
    std::mutex send_mu;
  };

  ncclResult_t Fail(ncclResult_t rc, const std::string& why);
  void Read(int peer);
  void Acknowledge(int peer);
  std::string SocketName(int rank) const;

  const int rank_, size_;
  ncclUniqueId id_;
  std::string host_;  // this process's, as its peers are told it (Connect)
  std::vector<std::unique_ptr<Peer>> peers_;
  std::mutex mu_;  // the inboxes, `closed`, last_error_
  std::condition_variable cv_;
  std::string last_error_;
  std::atomic<ncclResult_t> async_error_{ncclInProgress};
  std::atomic<bool> aborted_{false};
  std::atomic<bool> revoked_{false};
  bool nonblocking_ = false;  // ncclConfig_t's blocking = 0
  std::atomic<bool> readers_joined_{false};
  int queued_ = 0;  // under mu_
};

}  // namespace host_gpu

struct ncclComm;
namespace host_gpu {
// Runs `connect` (then marks the communicator ready where it succeeded): in the background
// for a non-blocking config (ncclInProgress), else here (its result).
ncclResult_t StartConnecting(ncclComm* comm, const ncclConfig_t* config,
                             std::function<ncclResult_t()> connect);
}  // namespace host_gpu

// ncclComm_t's opaque type: the handle the application holds. Collectives queued on a
// stream hold the state too, so that an abort frees the handle at once.
struct ncclComm {
  std::shared_ptr<host_gpu::CommState> state;
  std::thread connecting;  // a non-blocking init's connection, in the background
  std::vector<std::pair<ncclRedOp_t, double>> premulsum;  // ncclRedOpCreatePreMulSum's
};
