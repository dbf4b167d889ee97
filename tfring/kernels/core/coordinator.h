// Coordinator: turns submitted tensors into collectives executed in the same order on every
// rank, one cycle at a time (its CycleDriver decides which thread runs the next). The
// design (the cycle, the response cache, graph bursts, process sets, join) is in
// docs/architecture.md, 'The cycle'.
//
// Who calls what, on which thread:
//  - Any thread (TF kernels, tests) calls Enqueue() or EnqueueAll(); a graph op's never
//    blocks on communication. An eager op's caller runs cycles itself while it waits, when
//    no other thread runs one (CycleDriver::Drive).
//  - Cycles run on the background thread or on such an eager caller's thread, one at a
//    time (cycle_driver.h): whoever runs a cycle is the only caller of the ControlPlane and
//    the Backend, and runs the `done` callbacks of what it completes.
//  - Start() and Shutdown() are called by the owner (the global runtime), once each.
//
// Its parts, each owning its state:
//  - Intake (intake.h): the queue of submitted ops and the state any thread may ask about;
//  - CycleDriver (cycle_driver.h): which thread runs the next cycle, the background
//    thread and its waits, graph bursts;
//  - CycleEntries (cycle_entries.h): the entries taken from the intake and not finished,
//    each held by its cache slot (found from its kernel's ticket, prefetched) or by name,
//    and this rank's join;
//  - CacheSync (cache_sync.h): the response cache, which every rank keeps identical (steps
//    2 and 3);
//  - NegotiationRound (negotiation_round.h): step 3 and rank 0's decisions;
//  - ExecutionStep (execution_step.h): step 4, with the executors of each process set and
//    a joined rank's stand-ins;
//  - StragglerWatch (straggler_watch.h): how long this rank's collectives waited for the
//    others, sent to rank 0 about once a second for the straggler report.
// The Coordinator itself (coordinator.cc) runs the steps in order and keeps what links
// them: every rank's joins as of the last cycle, the tuned fusion threshold and cycle time,
// the timeline every part records into, the numbering of unnamed calls (unnamed_names.h)
// and when the job last had work (the control plane's activity).
//
// Each cycle, run in lockstep by every rank (each step a collective of the control plane):
//  1. take newly enqueued entries (ops from a graph once their burst has ended);
//  2. AND-allreduce one bit set (cycle_bits.h): cache slots ready everywhere, joins, stops;
//  3. if any rank has new requests, a negotiation round through rank 0;
//  4. execute what is ready, in fusion groups (fusion.h), then call each entry's `done`;
//     when rank 0 asked for it in step 2, the straggler watch's exchange.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tfring/kernels/common/options.h"
#include "tfring/kernels/common/status.h"
#include "tfring/kernels/core/autotuner.h"
#include "tfring/kernels/core/backend.h"
#include "tfring/kernels/core/cache_sync.h"
#include "tfring/kernels/core/control_plane.h"
#include "tfring/kernels/core/cycle_driver.h"
#include "tfring/kernels/core/cycle_entries.h"
#include "tfring/kernels/core/cycle_responses.h"
#include "tfring/kernels/core/entry.h"
#include "tfring/kernels/core/execution_step.h"
#include "tfring/kernels/core/flight_recorder.h"
#include "tfring/kernels/core/group_executor.h"
#include "tfring/kernels/core/intake.h"
#include "tfring/kernels/core/negotiation_round.h"
#include "tfring/kernels/core/op_countdown.h"
#include "tfring/kernels/core/set_executors.h"
#include "tfring/kernels/core/straggler_watch.h"
#include "tfring/kernels/core/timeline.h"
#include "tfring/kernels/core/unnamed_names.h"

namespace tfring {

class Coordinator : private CycleDriver::Cycles {
 public:
  // `backend` carries host tensors. `device_executor` runs GPU tensors (Entry::device >= 0);
  // without one, such tensors fail with an error that says so. Without `process_sets`,
  // tensors in a process set other than all ranks fail with an error.
  Coordinator(const Options& options, std::unique_ptr<ControlPlane> control_plane,
              std::unique_ptr<Backend> backend,
              std::unique_ptr<GroupExecutor> device_executor = nullptr,
              ProcessSetFactory process_sets = nullptr);
  ~Coordinator() override;  // Shutdown() if still running

  void Start();
  // Thread-safe. If the coordinator is not running, calls entry.done(error) right away.
  // An eager op's submitter that counts its entries' `done` calls in `countdown`
  // (op_countdown.h) runs cycles on its own thread until the op is done, for a while
  // (CycleDriver::Drive); without one, the background thread runs them.
  void Enqueue(Entry entry, const OpCountdown* countdown = nullptr);
  // The tensors of one op, queued together: the cycle takes them all at once. A graph op's
  // several tensors (a grouped op) start without waiting for the burst to end.
  void EnqueueAll(std::vector<Entry> entries, const OpCountdown* countdown = nullptr);
  // Asks every rank to stop at the next cycle, fails this rank's pending entries, and waits
  // for the background thread to end. Idempotent.
  void Shutdown();

  // Rank 0 writes the timeline (timeline.h); on other ranks these do nothing. Thread-safe.
  Status StartTimeline(const std::string& path, bool mark_cycles);
  void StopTimeline();

  // This rank's flight recorder (flight_recorder.h); it outlives the coordinator for a dump
  // after a stop. Thread-safe.
  std::shared_ptr<const FlightRecorder> flight_recorder() const { return recorder_; }
  // Called (on the cycle's thread) when the cycle fails every op for a reason other than
  // this rank's own shutdown with nothing pending (a stall, a lost peer, a backend's
  // failure, another rank's shutdown while ops waited): the owner dumps the flight
  // recorder, and returns what the ops' error adds (where the dumps are). Set before Start().
  void SetFailureDump(std::function<std::string(const std::string& why)> dump) {
    failure_dump_ = std::move(dump);
  }

  // The straggler report rank 0 last sent (straggler_watch.h), JSON; "" before the first.
  // Thread-safe.
  std::string StragglerReport() const { return straggler_watch_.Report(); }

  // Setting up what the options ask for beyond the thread (the autotuner's log): check
  // before Start().
  const Status& init_status() const { return round_.init_status(); }
  // The fusion threshold and cycle time in force (the autotuner changes them). Thread-safe.
  TunedParams tuned_params() const;

  // The number of this process's next unnamed eager call in `process_set`
  // (unnamed_names.h). Thread-safe.
  int64_t NextUnnamedNumber(const std::vector<int32_t>& process_set) {
    return unnamed_names_.Next(process_set);
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  // True when the control plane failed (a peer died or stopped answering): its
  // communicator must not be used again, not even to finalize.
  bool peer_lost() const;
  // True once the cycle has ended (Shutdown here, another rank's shutdown, a lost peer):
  // Enqueue then fails every entry at once.
  bool stopped() const;
  // True once a failure stopped the cycle (a stall shutdown, a lost peer, a backend's
  // failure, a damaged message: FailEverything), not a shutdown. Thread-safe.
  bool failed() const { return failed_.load(); }

 private:
  // CycleDriver::Cycles: what the driver runs (cycle_driver.h).
  Status RunCycle(bool* progress, bool* stop) override;  // the cycle, steps 1 to 4
  bool AnyPending() const override { return !entries_.pending().empty(); }
  // A failure (a lost peer, a backend's error, rank 0's abort after a stall): fails every
  // op after the flight recorder's dump.
  void FailEverything(const Status& status) override;
  // Fails every op with `status`; dumps the flight recorder first when `always_dump`, or
  // when ops were waiting.
  void FailAll(const Status& status, bool always_dump);
  SteadyClock::duration cycle_time() const override;
  // Step 3: sends this rank's new requests; applies the tuned settings rank 0 sent, records
  // its responses in the cache (an entry on an evicted slot is then negotiated), re-aligns
  // the numbering of unnamed calls, and adds the responses to *execute. On rank 0's abort,
  // runs what was decided before it, fails everything and sets *stop.
  Status Negotiate(CycleResponses* execute, bool* stop);
  // Step 4: the timeline's cycle mark and QUEUE phases, the execution, and its bytes
  // recorded for the autotuner.
  void Execute(const CycleResponses& execute);
  // Checks and normalizes an entry's process set and makes its name the tensor key; a
  // message on error.
  std::string PrepareEntry(Entry* e) const;
  void ApplyParams(const ResponseList& list);

  const Options options_;
  std::unique_ptr<ControlPlane> control_plane_;
  const int rank_;
  const int size_;
  Timeline timeline_;  // before entries_ and execution_, which keep its address
  const std::shared_ptr<FlightRecorder> recorder_;  // before them too
  StragglerWatch straggler_watch_;                  // and this
  std::function<std::string(const std::string& why)> failure_dump_;
  std::atomic<bool> failed_{false};

  // Shared with every thread that submits, shuts down or asks about the state.
  Intake intake_;
  CycleDriver driver_;
  std::atomic<int64_t> fusion_threshold_bytes_;
  std::atomic<double> cycle_time_ms_;
  UnnamedNames unnamed_names_;

  // Owned by whoever runs a cycle.
  CycleEntries entries_;
  CacheSync cache_sync_;
  NegotiationRound round_;
  ExecutionStep execution_;
  std::vector<bool> joined_ranks_;         // as of the last cycle, every rank's
  SteadyClock::time_point last_work_{};  // the last cycle that had entries pending
};

}  // namespace tfring
