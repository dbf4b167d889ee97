// StragglerTally: rank 0's account of which ranks hold the job back (docs/hangs-and-
// stragglers.md, 'The straggler report'). Pure arithmetic over what the ranks send it
// (straggler_watch.h), so it is tested directly.
//
// What it is given: per window (about a second of cycles), each rank's list of the cycles
// that agreed some of its collectives, and for each how long its longest-waiting entry of
// that cycle had waited (from its op's submission to the cycle's agreement). The cycles are
// numbered alike on every rank (they run in lockstep), and a cycle's agreement reaches every
// rank at about the same moment, so within one cycle the rank that waited least came in last,
// and `longest wait - rank r's wait` is how long the first rank in waited for rank r: r's
// lateness in that cycle. A rank's clock never meets another's: only durations are compared.
//
// Per rank it keeps the total lateness (how long the others waited for it), the cycles it was
// last into and the cycles it was late into (each by at least kLastInSeconds), its longest
// lateness (which collective, when), and its lateness and late cycles per collective. From
// those, the report names the ranks that hold the job back and how: late in most cycles of
// the collective it holds the others up in most ("every_step"), in one event that is most of its
// lateness ("once"), or otherwise ("at_times"). The thresholds are documented in
// docs/hangs-and-stragglers.md; the unit tests pin them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tfring {

// One rank's record of one cycle (straggler_watch.h sends them).
struct CycleWait {
  int64_t cycle = 0;
  int64_t wait_us = 0;     // its longest-waiting entry of that cycle, submission to agreement
  std::string collective;  // that entry's tensor (an unnamed call's call site: Timeline::RowName)
  int64_t agreed_us = 0;   // when the cycle agreed, on this rank's steady clock (microseconds)
};

// One rank's window: its cycles (at most a cap; past it only counted) in cycle order.
struct WaitWindow {
  std::vector<CycleWait> cycles;
  int64_t uncounted_cycles = 0;  // cycles past the cap: neither compared nor reported
};

class StragglerTally {
 public:
  // A rank last into a cycle by at least this much counts as having held it up.
  static constexpr double kLastInSeconds = 0.001;

  explicit StragglerTally(int size);

  // A cycle where one rank came in last by at least kLastInSeconds (for the timeline).
  struct LastIn {
    int64_t agreed_us;  // rank 0's steady clock, or -1 when rank 0 had no entry in it
    int rank;
    double seconds;  // how long the first rank in waited for it
    std::string collective;
  };
  // Adds one exchange's windows (indexed by rank; `window_seconds` long, ending
  // `at_seconds` after the tally began). Returns the cycles somebody came in last to.
  std::vector<LastIn> Add(const std::vector<WaitWindow>& windows, double window_seconds,
                          double at_seconds);

  // The report as a JSON object (tfring.straggler_report(); its fields are documented
  // there).
  std::string Json() const;
  // The report in one line, for the log (TFRING_STRAGGLER_REPORT_SECONDS).
  std::string Line() const;

 private:
  // One rank in the cycles attributed to one collective.
  struct CollectiveTally {
    double seconds = 0;       // how long the others waited for the rank in it
    int64_t cycles = 0;       // its cycles the rank took part in
    int64_t late_cycles = 0;  // of those, ones the rank was late into
  };
  static std::vector<std::pair<std::string, CollectiveTally>> Largest(
      const std::map<std::string, CollectiveTally>& m, size_t n);
  struct RankTally {
    int64_t cycles = 0;        // compared cycles it took part in
    int64_t last_in = 0;       // of those, ones it came last into by >= kLastInSeconds
    int64_t late_cycles = 0;   // ones it came into that much after the first rank
    double held_seconds = 0;   // total lateness
    double longest_seconds = 0;
    std::string longest_collective;
    double longest_at = 0;     // seconds since the tally began (the window's end)
    std::map<std::string, CollectiveTally> by_collective;
  };
  struct Straggler {
    int rank;
    std::string kind;  // every_step, once, at_times
  };
  std::vector<Straggler> Stragglers() const;

  const int size_;
  std::vector<RankTally> ranks_;
  int64_t windows_ = 0;
  double seconds_ = 0;
  int64_t cycles_compared_ = 0;
  int64_t cycles_uncounted_ = 0;
};

}  // namespace tfring
