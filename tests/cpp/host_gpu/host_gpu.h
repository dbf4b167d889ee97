// The host GPU: the CUDA runtime, driver and NCCL calls that tfring's GPU path makes,
// emulated on the host, so that its native GPU tests (test_nccl_*, scenario_nccl_*) run
// without a GPU, in CI. The runs name it as the NCCL and the CUDA runtime tfring's calls go to
// (TFRING_NCCL_LIBRARY, TFRING_CUDA_RUNTIME_LIBRARY: backends/nccl/nccl_library.h), and it is
// libcuda.so.1 for the batched-copy kernel; nothing of it is linked into tfring. BUILD.md,
// 'GPU (NCCL)', says what it can and cannot find.
//
// What it keeps of a GPU: device memory is host memory, but work queued on a stream runs
// later, in order, on the stream's own thread, so the ordering tfring relies on (events,
// cudaStreamWaitEvent, a stream waiting on another's producer) is what makes results right
// or wrong, as on a GPU; cudaFree waits for every stream, as CUDA's does, and cudaMemcpy
// for none (the legacy default stream does not order non-blocking streams). NCCL's calls queue
// their collective on the stream, and the ranks move data through Unix sockets; a collective
// waits for its peers on the stream, so a peer that died or stopped leaves the stream
// waiting until its connection closes or the communicator is aborted.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

// The runtime's opaque handles (cudaStream_t, cudaEvent_t), defined here.
struct CUstream_st {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> tasks;
  bool busy = false;     // a task is running
  bool closing = false;  // destroyed: the worker ends once the queue is empty
  int device = 0;
};

namespace host_gpu {

// One cudaEventRecord: done once its stream has passed it. A wait holds the record it was
// queued for, so a later record (on any stream) neither releases nor delays it.
struct Record {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
};

struct EventState {
  std::mutex mu;
  std::shared_ptr<Record> latest;  // null: never recorded (complete, as CUDA's)
};

// Queues `task` on `stream` (run at once, on this thread, for the null stream).
void Enqueue(CUstream_st* stream, std::function<void()> task);

// Whether [p, p + bytes) lies in one cudaMalloc'ed block (NCCL's pointer check).
bool IsDeviceMemory(const void* p, size_t bytes);

// The error armed for the next call named `call` made on another thread than the one that
// armed it (tfring_host_gpu_fail_next), taken once; 0 when none.
int TakeInjected(const char* call);

}  // namespace host_gpu

// Test control, found with dlsym in this library (tests/cpp/test_nccl_global_runtime.cc): the
// next call named `call` ("cudaStreamWaitEvent", "cudaMalloc", "ncclGetUniqueId") that a
// thread other than this one makes (tfring's own, not the test's) fails with `error` (the
// cudaError_t or ncclResult_t that call returns), once: a GPU error on one rank, on demand.
extern "C" void tfring_host_gpu_fail_next(const char* call, int error);

struct CUevent_st {
  std::shared_ptr<host_gpu::EventState> state = std::make_shared<host_gpu::EventState>();
};
