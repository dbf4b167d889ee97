// The host GPU's NCCL (host_gpu.h): the calls tfring makes, each collective queued on its
// stream and run there over the communicator's sockets (host_nccl_comm.h). Reductions go
// in rank order on every rank, so every rank gets the same bits (host_nccl_reduce.h).
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "tests/cpp/host_gpu/host_gpu.h"
#include "tests/cpp/host_gpu/host_nccl_comm.h"
#include "tests/cpp/host_gpu/host_nccl_reduce.h"
#include "tfring/kernels/common/half.h"

namespace host_gpu {
namespace {

enum Kind : uint32_t { kAllReduce = 1, kBroadcast, kReduce, kAllGather, kReduceScatter, kP2p };

// How long ncclCommDestroy waits for its queued collectives before it says that NCCL's would
// wait for ever (a healthy one's finish in milliseconds).
constexpr double kDestroyPatienceSeconds = 10;

struct Call {
  Kind kind;
  const void* send;
  void* recv;
  size_t count;  // elements: of the result (allreduce, reduce, broadcast), of each rank's
                 // part (allgather, reducescatter), sent or received (p2p)
  ncclDataType_t type;
  int op;        // ncclRedOp_t, or kPreMulSum
  double scale;  // PreMulSum's scalar
  int peer;      // root, or the p2p peer
  bool is_recv;  // p2p
  std::shared_ptr<CommState> comm;
  cudaStream_t stream;
};

thread_local int group_depth = 0;
thread_local std::vector<Call> group_calls;
thread_local ncclResult_t group_error = ncclSuccess;  // the first call a group refused
thread_local std::string last_error_text;

// Every rank's `bytes` from `mine` (this rank's) and the peers' messages, combined in rank
// order into `out`.
ncclResult_t ReduceFromAll(CommState& c, Kind kind, const void* mine, void* out, size_t count,
                           const Call& call, const std::vector<int>& from) {
  const size_t bytes = count * TypeSize(call.type);
  std::vector<char> acc(bytes), theirs(bytes);
  bool first = true;
  for (int r : from) {
    const void* part = mine;
    if (r != c.rank()) {
      const ncclResult_t rc = c.Receive(r, kind, theirs.data(), bytes);
      if (rc != ncclSuccess) return rc;
      part = theirs.data();
    }
    Accumulate(acc.data(), part, count, call.type, call.op, call.scale, first);
    first = false;
  }
  if (call.op == ncclAvg) DivideBy(acc.data(), count, call.type, c.size());
  std::memcpy(out, acc.data(), bytes);
  return ncclSuccess;
}

std::vector<int> AllRanks(int size) {
  std::vector<int> ranks(size);
  for (int r = 0; r < size; ++r) ranks[r] = r;
  return ranks;
}

// One collective (or one side of a p2p pair), on the stream's thread.
ncclResult_t Run(const Call& call) {
  CommState& c = *call.comm;
  const size_t bytes = call.count * TypeSize(call.type);
  const int me = c.rank(), n = c.size();
  ncclResult_t rc = ncclSuccess;
  switch (call.kind) {
    case kAllReduce: {
      std::vector<char> mine(static_cast<const char*>(call.send),
                             static_cast<const char*>(call.send) + bytes);
      for (int r = 0; r < n && rc == ncclSuccess; ++r) {
        if (r != me) rc = c.Send(r, kAllReduce, mine.data(), bytes);
      }
      if (rc == ncclSuccess) rc = ReduceFromAll(c, kAllReduce, mine.data(), call.recv, call.count,
                                                call, AllRanks(n));
      return rc;
    }
    case kReduce: {
      if (me != call.peer) return c.Send(call.peer, kReduce, call.send, bytes);
      std::vector<char> mine(static_cast<const char*>(call.send),
                             static_cast<const char*>(call.send) + bytes);
      return ReduceFromAll(c, kReduce, mine.data(), call.recv, call.count, call, AllRanks(n));
    }
    case kBroadcast: {
      if (me != call.peer) return c.Receive(call.peer, kBroadcast, call.recv, bytes);
      for (int r = 0; r < n && rc == ncclSuccess; ++r) {
        if (r != me) rc = c.Send(r, kBroadcast, call.send, bytes);
      }
      if (rc == ncclSuccess && call.recv != call.send) std::memmove(call.recv, call.send, bytes);
      return rc;
    }
    case kAllGather: {
      for (int r = 0; r < n && rc == ncclSuccess; ++r) {
        if (r != me) rc = c.Send(r, kAllGather, call.send, bytes);
      }
      char* out = static_cast<char*>(call.recv);
      if (rc == ncclSuccess) std::memmove(out + me * bytes, call.send, bytes);
      for (int r = 0; r < n && rc == ncclSuccess; ++r) {
        if (r != me) rc = c.Receive(r, kAllGather, out + r * bytes, bytes);
      }
      return rc;
    }
    case kReduceScatter: {
      const char* in = static_cast<const char*>(call.send);
      for (int r = 0; r < n && rc == ncclSuccess; ++r) {
        if (r != me) rc = c.Send(r, kReduceScatter, in + r * bytes, bytes);
      }
      if (rc != ncclSuccess) return rc;
      std::vector<char> mine(in + me * bytes, in + (me + 1) * bytes);
      return ReduceFromAll(c, kReduceScatter, mine.data(), call.recv, call.count, call,
                           AllRanks(n));
    }
    case kP2p:
      return call.is_recv ? c.Receive(call.peer, kP2p, call.recv, bytes)
                          : c.Send(call.peer, kP2p, call.send, bytes);
  }
  return ncclInternalError;
}

// A group's calls, in order, except that receives go last: every send is out before this
// rank waits for anything a peer sends in the same group; then it waits until its peers took
// what it sent. A call that fails (its
// communicator failed or was aborted) leaves the stream waiting until the abort, as a
// NCCL kernel whose peer is lost spins until then.
void RunAll(const std::vector<Call>& calls) {
  auto failed = [](const Call& call) {
    call.comm->WaitUntilAborted();
  };
  for (const Call& call : calls) {
    const ncclResult_t state = call.comm->async_error();  // in progress: its own launch
    if (state != ncclSuccess && state != ncclInProgress) return failed(call);
    if (!(call.kind == kP2p && call.is_recv) && Run(call) != ncclSuccess) return failed(call);
  }
  for (const Call& call : calls) {
    if (call.kind == kP2p && call.is_recv && Run(call) != ncclSuccess) return failed(call);
  }
  // The call ends once its peers took what it sent (a send, a broadcast's root, a reduce's
  // other ranks wait for their peers, as NCCL's kernels do).
  for (const Call& call : calls) {
    if (call.comm->WaitForAcks() != ncclSuccess) return failed(call);
  }
}

ncclResult_t Error(ncclResult_t rc, const std::string& why) {
  last_error_text = why;
  return rc;
}

// Checks a call and queues it (or keeps it for the group's end).
// Queues `calls` on the first one's stream (tfring gives a group one stream); a
// non-blocking communicator is in progress for a moment after (ncclInProgress).
ncclResult_t Launch(std::vector<Call> calls) {
  bool nonblocking = false;
  for (const Call& call : calls) {
    if (call.comm->nonblocking()) {
      call.comm->Launched();
      nonblocking = true;
    }
  }
  std::vector<std::shared_ptr<CommState>> comms;  // each once: a group may share one
  for (const Call& call : calls) {
    if (std::find(comms.begin(), comms.end(), call.comm) == comms.end()) {
      comms.push_back(call.comm);
      call.comm->Queue();
    }
  }
  cudaStream_t stream = calls[0].stream;
  Enqueue(stream, [calls, comms] {
    RunAll(calls);
    for (const auto& comm : comms) comm->Ran();
  });
  return nonblocking ? ncclInProgress : ncclSuccess;
}

// Checks a call and launches it, or keeps it for the group's end. A call refused inside a
// group fails the whole group at ncclGroupEnd, as NCCL's.
ncclResult_t Submit(Call call, ncclComm_t comm, const void* in, size_t in_bytes, void* out,
                    size_t out_bytes) {
  auto refuse = [](ncclResult_t rc, const std::string& why) {
    if (group_depth > 0 && group_error == ncclSuccess) group_error = rc;
    return Error(rc, why);
  };
  if (comm == nullptr) return refuse(ncclInvalidArgument, "a null communicator");
  call.comm = comm->state;
  const ncclResult_t state = call.comm->async_error();
  if (call.comm->revoked()) return refuse(ncclInvalidUsage, "the communicator was revoked");
  if (state == ncclInProgress) {
    // ncclCommEnsureReady's answer: a call must wait until the last one has finished.
    return refuse(ncclInvalidArgument, "the communicator is still in progress (its init or "
                                       "its last call)");
  }
  if (state != ncclSuccess) return refuse(state, "the communicator has failed");
  if (TypeSize(call.type) == 0) return refuse(ncclInvalidArgument, "a data type not emulated");
  if (call.op >= ncclNumOps) {
    const size_t i = static_cast<size_t>(call.op - ncclNumOps);
    if (i >= comm->premulsum.size()) return refuse(ncclInvalidArgument, "an unknown reduction");
    call.scale = comm->premulsum[i].second;
    call.op = kPreMulSum;
  }
  // NCCL's pointer check (NCCL_CHECK_POINTERS=1), always: a host pointer is refused here.
  if ((in_bytes > 0 && !IsDeviceMemory(in, in_bytes)) ||
      (out_bytes > 0 && !IsDeviceMemory(out, out_bytes))) {
    return refuse(ncclInvalidArgument,
                  "a buffer that is not device memory (NCCL's pointer check)");
  }
  if (group_depth > 0) {
    group_calls.push_back(std::move(call));
    return ncclSuccess;
  }
  return Launch({std::move(call)});
}

Call NewCall(Kind kind, const void* send, void* recv, size_t count, ncclDataType_t type, int op,
             int peer, cudaStream_t stream) {
  Call call;
  call.kind = kind;
  call.send = send;
  call.recv = recv;
  call.count = count;
  call.type = type;
  call.op = op;
  call.scale = 1.0;
  call.peer = peer;
  call.is_recv = false;
  call.stream = stream;
  return call;
}

}  // namespace
}  // namespace host_gpu

using host_gpu::NewCall;
using host_gpu::Submit;
using host_gpu::TypeSize;

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  // The headers': with ncclCommRevoke, ncclCommShrink and ncclCommGrow (host_nccl_reshape.cc).
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t comm) {
  static thread_local std::string text;
  text = comm != nullptr ? comm->state->last_error() : "";
  if (text.empty()) text = host_gpu::last_error_text;
  return text.c_str();
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  if (const int injected = host_gpu::TakeInjected("ncclGetUniqueId")) {
    return static_cast<ncclResult_t>(injected);
  }
  static std::atomic<unsigned> counter{0};
  std::random_device random;
  std::memset(uniqueId, 0, sizeof(*uniqueId));
  std::snprintf(uniqueId->internal, sizeof(uniqueId->internal), "tfring-host-nccl-%d-%u-%08x%08x",
                static_cast<int>(getpid()), counter++, random(), random());
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t* config) {
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    return host_gpu::Error(ncclInvalidArgument, "a rank outside the communicator");
  }
  auto* handle = new ncclComm;
  handle->state = std::make_shared<host_gpu::CommState>(rank, nranks, commId);
  *comm = handle;
  std::shared_ptr<host_gpu::CommState> state = handle->state;
  return host_gpu::StartConnecting(handle, config, [state] { return state->Connect(); });
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return ncclCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  if (comm == nullptr) return ncclInvalidArgument;
  *asyncError = comm->state->async_error();
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  comm->state->MarkAborted();
  if (comm->connecting.joinable()) comm->connecting.join();
  comm->state->Abort();
  delete comm;  // collectives still queued hold the state, and find it aborted
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  if (comm->connecting.joinable()) comm->connecting.join();
  // NCCL's destroy first lets the work queued on the communicator finish, and waits for ever
  // for a collective whose peer is lost: such a communicator must be aborted. Waiting for
  // ever here would only end in the test's timeout; this says why instead.
  if (!comm->state->WaitForQueued(host_gpu::kDestroyPatienceSeconds)) {
    std::fprintf(stderr, "host GPU: ncclCommDestroy on rank %d waited %g s for collectives "
                 "queued on its communicator that cannot finish (a peer lost or stopped): "
                 "NCCL's would wait for ever. A communicator whose work cannot finish must be "
                 "aborted (ncclCommAbort), not destroyed.\n", comm->state->rank(),
                 host_gpu::kDestroyPatienceSeconds);
    std::fflush(stderr);
    std::abort();
  }
  comm->state->Abort();
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm) {
  if (residence != ncclScalarHostImmediate) {
    return host_gpu::Error(ncclInvalidArgument, "only host-immediate scalars are emulated");
  }
  double value;
  switch (datatype) {
    case ncclFloat16: value = tfring::HalfToFloat(*static_cast<uint16_t*>(scalar)); break;
    case ncclBfloat16: value = tfring::BFloat16ToFloat(*static_cast<uint16_t*>(scalar)); break;
    case ncclFloat32: value = *static_cast<float*>(scalar); break;
    case ncclFloat64: value = *static_cast<double*>(scalar); break;
    default: return host_gpu::Error(ncclInvalidArgument, "PreMulSum of a non-float type");
  }
  comm->premulsum.emplace_back(ncclSum, value);
  *op = static_cast<ncclRedOp_t>(ncclNumOps + comm->premulsum.size() - 1);
  return ncclSuccess;
}

ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  return op >= ncclNumOps ? ncclSuccess : ncclInvalidArgument;
}

ncclResult_t ncclGroupStart() {
  ++host_gpu::group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (host_gpu::group_depth == 0) return host_gpu::Error(ncclInvalidUsage, "ncclGroupEnd alone");
  if (--host_gpu::group_depth > 0) return ncclSuccess;
  std::vector<host_gpu::Call> calls;
  calls.swap(host_gpu::group_calls);
  const ncclResult_t refused = host_gpu::group_error;
  host_gpu::group_error = ncclSuccess;
  if (refused != ncclSuccess) return refused;  // nothing of the group runs
  if (calls.empty()) return ncclSuccess;
  return host_gpu::Launch(std::move(calls));
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
  if (count == 0) return ncclSuccess;
  const size_t bytes = count * TypeSize(datatype);
  return Submit(NewCall(host_gpu::kAllReduce, sendbuff, recvbuff, count, datatype, op, 0, stream),
                comm, sendbuff, bytes, recvbuff, bytes);
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  if (count == 0) return ncclSuccess;
  const size_t bytes = count * TypeSize(datatype);
  const bool root_here = comm != nullptr && comm->state->rank() == root;
  return Submit(NewCall(host_gpu::kReduce, sendbuff, recvbuff, count, datatype, op, root, stream),
                comm, sendbuff, bytes, recvbuff, root_here ? bytes : 0);
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  if (count == 0) return ncclSuccess;
  const size_t bytes = count * TypeSize(datatype);
  const bool root_here = comm != nullptr && comm->state->rank() == root;
  return Submit(NewCall(host_gpu::kBroadcast, sendbuff, recvbuff, count, datatype, ncclSum, root,
                        stream),
                comm, sendbuff, root_here ? bytes : 0, recvbuff, bytes);
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  if (sendcount == 0) return ncclSuccess;
  const size_t bytes = sendcount * TypeSize(datatype);
  const size_t ranks = comm != nullptr ? comm->state->size() : 1;
  return Submit(NewCall(host_gpu::kAllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0,
                        stream),
                comm, sendbuff, bytes, recvbuff, bytes * ranks);
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  if (recvcount == 0) return ncclSuccess;
  const size_t bytes = recvcount * TypeSize(datatype);
  const size_t ranks = comm != nullptr ? comm->state->size() : 1;
  return Submit(NewCall(host_gpu::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, 0,
                        stream),
                comm, sendbuff, bytes * ranks, recvbuff, bytes);
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  if (count == 0) return ncclSuccess;
  return Submit(NewCall(host_gpu::kP2p, sendbuff, nullptr, count, datatype, ncclSum, peer, stream),
                comm, sendbuff, count * TypeSize(datatype), nullptr, 0);
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  if (count == 0) return ncclSuccess;
  host_gpu::Call call =
      NewCall(host_gpu::kP2p, nullptr, recvbuff, count, datatype, ncclSum, peer, stream);
  call.is_recv = true;
  return Submit(std::move(call), comm, nullptr, 0, recvbuff, count * TypeSize(datatype));
}

}  // extern "C"
