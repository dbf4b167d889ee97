// Coordinator: turns submitted tensors into collectives executed in the same order on every
// rank, one cycle at a time (its CycleDriver decides which thread runs the next). The design (the cycle, the response
// cache, graph bursts, process sets, join) is in docs/architecture.md, 'The cycle'.
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
// Its parts, each owning its state (the rest is the cycle's, owned by whoever runs it):
//  - Intake (intake.h): the queue of submitted ops and the state any thread may ask about;
//  - CycleDriver (cycle_driver.h): which thread runs the next cycle, the background
//    thread and its waits, graph bursts;
//  - NegotiationRound (negotiation_round.h): step 3 and rank 0's decisions;
//  - CacheSync (cache_sync.h): the response cache, which every rank keeps identical (steps
//    2 and 3);
//  - SetExecutorTable (set_executors.h): the executors each process set runs on;
//  - JoinedStandIns (joined_stand_ins.h): what a joined rank runs in place of its tensors,
//    for one set's execution;
//  - the cycle's own: pending entries and joins (coordinator.cc, coordinator_take.cc,
//    coordinator_negotiate.cc, coordinator_execute.cc).
//
// Each cycle, run in lockstep by every rank (each step a collective of the control plane):
//  1. take newly enqueued entries (ops from a graph once their burst has ended);
//  2. AND-allreduce one bit set (cycle_bits.h): cache slots ready everywhere, joins, stops;
//  3. if any rank has new requests, a negotiation round through rank 0;
//  4. execute what is ready, in fusion groups (fusion.h), then call each entry's `done`.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tfring/kernels/core/backend.h"
#include "tfring/kernels/core/cache_sync.h"
#include "tfring/kernels/common/options.h"
#include "tfring/kernels/core/autotuner.h"
#include "tfring/kernels/core/control_plane.h"
#include "tfring/kernels/core/cycle_bits.h"
#include "tfring/kernels/core/cycle_driver.h"
#include "tfring/kernels/core/cycle_responses.h"
#include "tfring/kernels/core/entry.h"
#include "tfring/kernels/core/group_executor.h"
#include "tfring/kernels/core/host_executor.h"
#include "tfring/kernels/core/intake.h"
#include "tfring/kernels/core/negotiation_round.h"
#include "tfring/kernels/core/negotiator.h"
#include "tfring/kernels/core/op_countdown.h"
#include "tfring/kernels/core/pending_entries.h"
#include "tfring/kernels/core/set_executors.h"
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

 private:
  using State = PendingState;

  // CycleDriver::Cycles: what the driver runs (cycle_driver.h).
  Status RunCycle(bool* progress, bool* stop) override;  // the cycle, steps 1 to 4
  bool AnyPending() const override { return !pending_.empty(); }
  void FailEverything(const Status& status) override;
  SteadyClock::duration cycle_time() const override;
  void TakeNewEntries(SteadyClock::time_point now, std::vector<int>* invalidate, bool* progress);
  // Puts one new entry in the table (waiting on its cache slot, or to be negotiated), or
  // fails it (a name already in flight, an op after join()).
  void TakeNewEntry(Entry* entry, SteadyClock::time_point now, std::vector<int>* invalidate);
  // The cache slot of a named entry's name (-1: none): where its kernel's ticket says, while
  // that slot is unchanged, else looked up by name.
  int NamedSlot(const Entry& e) const;
  // In steady state, taking an entry is a few loads of memory that the step's computation
  // has pushed out of the CPU's caches: its kernel's ticket, its cache slot and the slot's
  // shape, and where PendingEntries puts it. One after another, each is a full miss
  // (docs/benchmarks.md); asked for together before the entries are taken, they overlap.
  void PrefetchSlots(const std::vector<std::vector<Entry>>& ops) const;
  // The cache slot a new entry may wait on (-1: none). `named_slot` is the slot of its name
  // (for a named entry); an unnamed call's is its call site's. A slot whose signature
  // differs is put in *invalidate.
  int CachedSlotFor(Entry* e, int named_slot, std::vector<int>* invalidate);
  // The entry waiting on a slot that is gone goes to negotiation (under its own name).
  void NegotiateInstead(int slot);
  Status Negotiate(CycleResponses* execute, bool* stop);
  // Returns the bytes of the collectives it ran.
  int64_t Execute(const CycleItems& responses);
  // Runs the responses of one process set that this rank is a member of.
  int64_t ExecuteInSet(const std::vector<int32_t>& members, const CycleItems& responses);
  // Checks and normalizes an entry's process set and makes its name the tensor key; a
  // message on error.
  std::string PrepareEntry(Entry* e) const;
  // Completes the pending join entries (every rank has joined).
  void FinishJoins(const std::vector<bool>& joined_before);
  void ApplyParams(const ResponseList& list);
  using Table = PendingEntries::ByName;
  // Completes a pending entry: takes it out of pending_, then calls its `done`.
  void Finish(const std::string& name, const Status& status);
  void Finish(Table::iterator it, const Status& status);
  void FinishAtSlot(int slot, const Status& status);

  const Options options_;
  std::unique_ptr<ControlPlane> control_plane_;
  const int rank_;
  const int size_;
  SetExecutorTable executors_;
  const std::vector<int32_t> all_ranks_;  // 0 .. size - 1

  // Shared with every thread that submits, shuts down or asks about the state.
  Intake intake_;
  CycleDriver driver_;

  // Owned by whoever runs a cycle.
  SteadyClock::time_point last_work_{};  // the last cycle that had entries pending
  std::vector<std::vector<Entry>> taken_;  // what TakeNewEntries took from intake_
  PendingEntries pending_;
  std::vector<std::string> send_order_;  // names in kToSend, submission order
  CacheSync cache_sync_;
  bool joined_ = false;                // a join entry of this rank is pending
  std::vector<bool> joined_ranks_;     // as of the last cycle, every rank's
  Timeline timeline_;
  std::atomic<int64_t> fusion_threshold_bytes_;
  std::atomic<double> cycle_time_ms_;
  NegotiationRound round_;
  UnnamedNames unnamed_names_;
};

}  // namespace tfring
