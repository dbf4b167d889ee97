// Timeline: a Chrome-trace JSON file (chrome://tracing, Perfetto) of what each tensor went
// through, written by rank 0 (TFRING_TIMELINE=path, or tfring.start_timeline).
//
// Each tensor is a row (a "thread" named after it; an unnamed eager call's row is its call
// site's, RowName); its phases follow one another on that row: SUBMIT (from when its op's kernel started until the background thread took it),
// NEGOTIATE (from when the background thread took it until every rank had it), QUEUE
// (until its fusion group started), then the executor's: WAIT_FOR_DATA (GPU tensors staged
// through the host), MEMCPY_IN_FUSION_BUFFER, the backend call (MPI_ALLREDUCE,
// NCCL_ALLGATHER, ...; its args name the fusion group, how many tensors and bytes it held),
// MEMCPY_OUT_FUSION_BUFFER. With mark_cycles, an instant event marks each cycle that ran
// collectives. The row "LAST INTO CYCLE" marks each cycle one rank held up, with that rank
// (written about a second later, by the straggler watch: straggler_watch.h).
//
// The file is a JSON array written event by event and flushed after every cycle; Stop()
// closes it. A job killed mid-run leaves it without its closing bracket, which Chrome's
// trace format allows and `python -m tfring.timeline` repairs on read.
//
// Start/Stop may be called from any thread; everything else only from the coordinator's
// thread. Every call is a cheap no-op while the timeline is off.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "tfring/kernels/common/status.h"
#include "tfring/kernels/core/entry.h"

namespace tfring {

class Timeline {
 public:
  ~Timeline();

  Status Start(const std::string& path, bool mark_cycles);
  void Stop();
  bool active() const { return active_.load(std::memory_order_relaxed); }

  // The tensor's SUBMIT phase, from `since` (its op's kernel started: Entry::created) until
  // now (the cycle took it): the kernel's checks and allocations, the hand-off to the
  // runtime's thread, and the wait for the cycle (a burst of graph ops, a cycle running).
  void Submitted(const Request& tensor, std::chrono::steady_clock::time_point since);
  // Ends the tensor's current phase (if any) and begins `phase`.
  void Phase(const Request& tensor, const std::string& phase, const std::string& args = "");
  // The same phase for every tensor of a fusion group; `args` (a JSON object's members)
  // go on each.
  void GroupPhase(const std::vector<Entry*>& group, const std::string& phase,
                  const std::string& args = "");
  // Ends the tensor's current phase: it is done.
  void End(const Request& tensor);
  // The row a tensor is shown on: its name, except that an unnamed eager call
  // ("unnamed.<n>") is shown under its call site ("unnamed@file.py:12"): such names never
  // recur, and a row per call would bury the trace.
  static std::string RowName(const Request& tensor);
  void MarkCycle();
  // The straggler watch's mark (rank 0, straggler_watch.h): `rank` came last into the cycle
  // that agreed at `agreed_us` (the steady clock's microseconds), `seconds` after the first
  // rank in, which waited in `collective`. An instant event on the row "LAST INTO CYCLE".
  void LastIn(int64_t agreed_us, int rank, double seconds, const std::string& collective);
  void Flush();

  // `"group": "<first tensor>", "tensors": N, "bytes": B` for a backend phase's args.
  static std::string GroupArgs(const std::vector<Entry*>& group, int64_t bytes);

 private:
  int64_t NowMicros() const;
  int RowOf(const std::string& tensor);
  void Write(const std::string& event);
  void EndLocked(const std::string& tensor, int64_t ts);

  std::mutex mutex_;
  std::atomic<bool> active_{false};
  std::FILE* file_ = nullptr;
  bool mark_cycles_ = false;
  int64_t start_us_ = 0;
  std::unordered_map<std::string, int> rows_;
  std::unordered_map<std::string, bool> open_;  // tensor -> a phase is open
};

// The JSON string literal for `s`, quotes included.
std::string JsonString(const std::string& s);

}  // namespace tfring
