// CycleEntries: the entries this rank's cycle has taken from the intake and not yet
// finished, and how it takes them: each new entry held by its response-cache slot (found
// from its kernel's ticket, by name, or by its call site when unnamed; a step's slots
// prefetched together) or by name for negotiation, refused when its name is already in
// flight or this rank has joined. It also owns this rank's join: from a join() until every
// rank has joined, the rank takes part with no data.
//
// Who calls it: only the thread that runs a cycle (Coordinator::RunCycle and the steps it
// calls), so unlocked. Finishing an entry calls its `done` on that thread.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "tfring/kernels/common/status.h"
#include "tfring/kernels/core/entry.h"
#include "tfring/kernels/core/flight_recorder.h"
#include "tfring/kernels/core/intake.h"
#include "tfring/kernels/core/pending_entries.h"
#include "tfring/kernels/core/response_cache.h"
#include "tfring/kernels/core/timeline.h"

namespace tfring {

class CycleEntries {
 public:
  using State = PendingState;
  using Table = PendingEntries::ByName;

  // Entries' submission, NEGOTIATE phase and end are recorded into `timeline`, when each
  // is taken and finished into `recorder`.
  CycleEntries(int rank, Timeline* timeline, FlightRecorder* recorder)
      : rank_(rank), timeline_(timeline), recorder_(recorder) {}

  // Step 1: takes what `intake` holds into the table, reading `cache` (which it never
  // changes). Slots whose cached signature no longer fits, and those whose entry waited
  // too long, go in *invalidate; *progress is set when anything was taken.
  void Take(Intake* intake, const ResponseCache& cache, SteadyClock::time_point now,
            std::vector<int>* invalidate, bool* progress);
  // The entry waiting on `slot` (there is one) goes to negotiation under its own name: its
  // slot is gone, or was not ready everywhere.
  void NegotiateInstead(int slot);
  // Whether any entry is to be sent in the next negotiation round.
  bool has_requests_to_send() const { return !send_order_.empty(); }
  // The requests of the entries to send, in submission order, marked sent.
  std::vector<Request> TakeRequestsToSend();

  // Whether a join entry of this rank is pending.
  bool joined() const { return joined_; }
  // Every rank has joined: completes this rank's join entries with `last`, the rank that
  // joined last, and this rank takes part with data again.
  void FinishJoins(int32_t last);

  // Completes an entry: takes it out of the table, then calls its `done`.
  void Finish(const std::string& name, const Status& status);
  void Finish(Table::iterator it, const Status& status);
  void FinishAtSlot(int slot, const Status& status);
  // Completes every entry with `status`, each naming its tensor (tfring has stopped).
  void FailAll(const Status& status);

  // The table: read by the cycle's bits and the execution step, which finds each of its
  // responses' own entries there (and finishes them through the calls above). Iterators
  // into pending().by_name() stay valid until the next Take or NegotiateInstead: Finish
  // only erases.
  PendingEntries& pending() { return pending_; }
  const PendingEntries& pending() const { return pending_; }

 private:
  // Puts one new entry in the table (waiting on its cache slot, or to be negotiated), or
  // fails it (a name already in flight, an op after join()).
  void TakeOne(Entry* entry, const ResponseCache& cache, SteadyClock::time_point now,
               std::vector<int>* invalidate);
  // In steady state, taking an entry is a few loads of memory that the step's computation
  // has pushed out of the CPU's caches: its kernel's ticket, its cache slot and the slot's
  // shape, and where PendingEntries puts it. One after another, each is a full miss
  // (docs/benchmarks.md); asked for together before the entries are taken, they overlap.
  void PrefetchSlots(const ResponseCache& cache) const;
  // The cache slot of a named entry's name (-1: none): where its kernel's ticket says, while
  // that slot is unchanged, else looked up by name.
  static int NamedSlot(const Entry& e, const ResponseCache& cache);
  // The cache slot a new entry may wait on (-1: none). `named_slot` is the slot of its name
  // (for a named entry); an unnamed call's is its call site's. A slot whose signature
  // differs is put in *invalidate.
  int CachedSlotFor(Entry* e, const ResponseCache& cache, int named_slot,
                    std::vector<int>* invalidate) const;
  // Holds `e` by name in `state`.
  void HoldByName(Entry* e, State state, SteadyClock::time_point now);

  const int rank_;
  Timeline* const timeline_;
  FlightRecorder* const recorder_;
  std::vector<std::vector<Entry>> taken_;  // what Take took from the intake; capacity reused
  PendingEntries pending_;
  std::vector<std::string> send_order_;  // names in kToSend, submission order
  bool joined_ = false;                  // a join entry of this rank is pending
};

}  // namespace tfring
