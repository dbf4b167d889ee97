// An Entry: one submitted tensor, from the moment an op enqueues it until its done callback.
// Framework-neutral: the TF glue fills it from a kernel's context; the C++ tests fill it from
// plain vectors.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "tfring/kernels/common/status.h"
#include "tfring/kernels/core/message.h"

namespace tfring {

constexpr int kHostMemory = -1;

// Where a kernel's tensor sat in the response cache last time: the slot, and the slot's
// generation then (ResponseCache::generation). A kernel keeps one per tensor for as long as
// it lives, and the runtime reads and renews it while the tensor's entry is pending. While
// the slot still holds what it held then, the runtime finds the tensor's slot without a
// lookup by name (which, on a step that moves megabytes, costs several cache misses).
// A ticket serves one tensor name for its whole life: the runtime takes an unchanged slot to
// be that name's without comparing names, so a submitter whose names change from call to
// call (an unnamed eager op, named when queued) must not pass one.
struct CacheTicket {
  std::atomic<uint64_t> value{0};  // generation << 32 | (slot + 1); 0: none yet

  static uint64_t Make(int slot, uint32_t generation) {
    return uint64_t{generation} << 32 | static_cast<uint32_t>(slot + 1);
  }
  static int SlotOf(uint64_t ticket) { return static_cast<int>(ticket & 0xffffffffu) - 1; }
  static uint32_t GenerationOf(uint64_t ticket) { return static_cast<uint32_t>(ticket >> 32); }
};

struct Entry {
  Request request;  // name, collective, dtype, shape, reduce op, root, scale factors
  const void* input = nullptr;
  // Allreduce and broadcast: preallocated, same shape as the input; it may be the input's
  // own buffer (an allreduce input nothing else holds, the broadcast root's tensor).
  // Allgather: null until allocate_output runs.
  void* output = nullptr;
  // Where input and output live: kHostMemory, or the ordinal of the GPU that holds them
  // (then request.on_device is true, and the device executor runs the op).
  int device = kHostMemory;
  // The kernel's ticket for this tensor (null: none; unnamed eager calls, tests).
  CacheTicket* cache_ticket = nullptr;
  // GPU entries: an event (cudaEvent_t) recorded on the producer's stream after the input
  // was written. The device executor makes its own stream wait for it before reading the
  // input (no host synchronization). Owned by the submitter, alive until `done`. Null: the
  // input is ready already.
  void* ready_event = nullptr;
  // GPU entries: the producer's stream (cudaStream_t), for outputs allocated later (allgather):
  // memory the framework hands out may still be in use by work queued on that stream.
  void* stream = nullptr;
  // Allgather only: allocates the output for `shape` (known after negotiation) and returns
  // its buffer. Called on the background thread.
  std::function<Status(const Shape& shape, void** buffer)> allocate_output;
  // Alltoall only: receives the rows this rank gets from each rank, before allocate_output.
  std::function<Status(const std::vector<int64_t>& received)> set_received_splits;
  // Set for eager ops: their caller waits for this op alone, so the runtime starts it at
  // once. Ops from graphs (tf.function, TF1) come in bursts, and the runtime waits for the
  // burst to end (TFRING_BATCH_GAP_US) so that its tensors are fused.
  bool eager = false;
  // When the entry was made: for a TF op, when its kernel started (ComputeAsync makes its
  // entries first). The timeline's SUBMIT phase runs from here until the cycle takes it.
  std::chrono::steady_clock::time_point created = std::chrono::steady_clock::now();
  // Its record in the flight recorder (flight_recorder.h); 0: none. Set when it is queued.
  uint64_t flight_seq = 0;
  // Called exactly once: by whoever runs the cycle that completes the entry (cycle_driver.h),
  // or on the submitter's thread when the op fails before it is queued. A submitter that
  // passed an OpCountdown counts it down here (op_countdown.h).
  std::function<void(const Status&)> done;
};

}  // namespace tfring
