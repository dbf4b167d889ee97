// FlightRecorder: this rank's record of its most recent collectives, kept always (a bounded
// ring, TFRING_FLIGHT_RECORDER_ENTRIES of them; 0 turns it off) and written out as one JSON
// file when a job hangs or fails (docs/hangs-and-stragglers.md): which tensor, op, dtype,
// shape and process set, the call site of an unnamed eager call, and when each was
// submitted (its op's kernel started), taken by a cycle, agreed by every rank (its response
// came), started (its fusion group's backend call began) and finished, with its status.
// `python -m tfring.flight_recorder DIR` reads every rank's file.
//
// Who calls what: Submitted() on any submitting thread (Coordinator::EnqueueAll); Taken,
// Agreed, Started, Finished and CycleRan on the thread that runs a cycle; Json() on any
// thread (a dump). One mutex guards the ring: each call holds it for a few stores.
// An entry carries its record's sequence number (Entry::flight_seq); a record the ring has
// since reused for a newer entry is not touched again.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "tfring/kernels/common/status.h"
#include "tfring/kernels/core/message.h"

namespace tfring {

class FlightRecorder {
 public:
  using Clock = std::chrono::steady_clock;

  explicit FlightRecorder(int64_t capacity);

  bool on() const { return !ring_.empty(); }
  // Starts a record for `request` (made at `created`); its sequence number (0 when off).
  uint64_t Submitted(const Request& request, Clock::time_point created);
  void Taken(uint64_t seq, Clock::time_point when) { Mark(seq, &Record::taken, when); }
  void Agreed(uint64_t seq, Clock::time_point when) { Mark(seq, &Record::agreed, when); }
  void Started(uint64_t seq, Clock::time_point when) { Mark(seq, &Record::started, when); }
  void Finished(uint64_t seq, const Status& status);
  void CycleRan() { cycles_.fetch_add(1, std::memory_order_relaxed); }

  // The ring, oldest first, as the members of a JSON object (no braces): "cycles",
  // "entries" (each record; times in seconds since the epoch, null where not reached) and
  // "capacity".
  std::string JsonMembers() const;

 private:
  struct Record {
    uint64_t seq = 0;  // 0: unused
    std::string name, call_site;
    CollectiveKind kind = CollectiveKind::kAllreduce;
    DataType dtype = DataType::kFloat32;
    ReduceOp reduce_op = ReduceOp::kSum;
    int32_t root_rank = 0;
    Shape shape;
    std::vector<int32_t> process_set;
    bool on_device = false;
    Clock::time_point submitted{}, taken{}, agreed{}, started{}, finished{};
    bool done = false;
    std::string error;  // empty: ok (when done)
  };

  void Mark(uint64_t seq, Clock::time_point Record::*field, Clock::time_point when);
  Record* Find(uint64_t seq);  // under mutex_; null when reused or off

  mutable std::mutex mutex_;
  std::vector<Record> ring_;
  uint64_t next_seq_ = 1;
  std::atomic<int64_t> cycles_{0};
};

}  // namespace tfring
