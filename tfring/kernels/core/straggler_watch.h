// StragglerWatch: the coordinator's part that finds the ranks holding the job back
// (docs/hangs-and-stragglers.md, 'The straggler report').
//
// Every rank notes, for each cycle that agreed some of its collectives, how long the
// longest-waiting of them had waited since its op was submitted. About once a window
// (TFRING_STRAGGLER_WINDOW_SECONDS, 1 s; 0 turns the watch off), rank 0 clears a flag of
// the cycle's bit set (cycle_bits.h), and in that cycle every rank sends its window's records
// to rank 0 (one gather), whose StragglerTally (straggler_tally.h) compares them cycle by
// cycle, and rank 0's report comes back to every rank (one broadcast): every rank can then
// read the same report (tfring.straggler_report()). Rank 0 also marks in the timeline which
// rank was last into each cycle that one held up, and logs the report's line every
// TFRING_STRAGGLER_REPORT_SECONDS (0: never).
//
// Who calls what: Agreed, EndCycle, ExchangeDue and Exchange on the thread that runs a cycle
// (every rank calls Exchange in the same cycles); Report on any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "tfring/kernels/common/options.h"
#include "tfring/kernels/common/status.h"
#include "tfring/kernels/core/control_plane.h"
#include "tfring/kernels/core/straggler_tally.h"
#include "tfring/kernels/core/timeline.h"

namespace tfring {

class StragglerWatch {
 public:
  using Clock = std::chrono::steady_clock;
  // The cycles a rank keeps per window: at most kMaxCyclesPerWindow, and fewer in a large
  // job, so that rank 0 gathers about kRecordsPerWindow records a window in all (at least 64
  // a rank); past it, cycles are only counted (an eager loop of tiny ops runs tens of
  // thousands of cycles a second).
  static constexpr size_t kMaxCyclesPerWindow = 4096;
  static constexpr size_t kRecordsPerWindow = 262144;

  StragglerWatch(const Options& options, int rank, int size);

  bool on() const { return window_seconds_ > 0; }
  // Step 4: one of this rank's entries, submitted at `submitted`, was agreed at `agreed`.
  void Agreed(Clock::time_point submitted, Clock::time_point agreed, const Request& tensor);
  // After step 4: closes this cycle's record (if any of its entries were agreed).
  void EndCycle();
  // Rank 0, before step 2: whether this cycle should hold the exchange (a window has passed
  // since the last and work was done since). Always false on other ranks and when off.
  bool ExchangeDue(Clock::time_point now) const;
  // The exchange, on every rank in the cycle whose bits asked for it. An error is the
  // control plane's (a lost peer), or a damaged window (named by its sender).
  Status Exchange(ControlPlane* control_plane, Timeline* timeline);
  // The last report rank 0 sent, as JSON (straggler_tally.h), or "" before the first.
  std::string Report() const;

  // The window's encoding (one rank's records), exposed for the unit tests.
  static std::string Encode(const WaitWindow& window);
  static Status Decode(const std::string& bytes, int from_rank, WaitWindow* window);

 private:
  const int rank_;
  const double window_seconds_;
  const double report_seconds_;
  const size_t max_cycles_;  // per window (kMaxCyclesPerWindow, fewer in a large job)
  const Clock::time_point start_;
  int64_t cycle_ = 0;               // cycles ended; the same count on every rank
  bool cycle_has_wait_ = false;     // this cycle agreed some of this rank's entries
  CycleWait current_;               // its longest wait so far
  WaitWindow window_;
  Clock::time_point last_exchange_;
  Clock::time_point last_log_;
  std::unique_ptr<StragglerTally> tally_;  // rank 0's
  mutable std::mutex report_mutex_;
  std::string report_;
};

}  // namespace tfring
