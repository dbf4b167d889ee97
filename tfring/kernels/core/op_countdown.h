// OpCountdown: how many of one op's entries are not done yet. It is the submitter's: each
// entry's `done` counts it down, and the submitter completes its op when it reaches zero
// (the TF kernel, tf/adapter.h; XLA's call, tf/xla/xla_handler.cc). An eager caller that
// runs cycles itself until its op is done (CycleDriver::Drive) reads the same count, so an
// op is counted once, by whoever submitted it.
//
// Lifetime: it must outlive the last `done` of the op's entries, which may run on another
// thread after Drive returns (an op whose peers are late is left to the background thread).
#pragma once

#include <atomic>

namespace tfring {

class OpCountdown {
 public:
  explicit OpCountdown(int entries) : remaining_(entries) {}
  OpCountdown(const OpCountdown&) = delete;
  OpCountdown& operator=(const OpCountdown&) = delete;

  // One entry is done; true for the last. Orders what the entry's `done` wrote before it.
  bool CountDown() { return remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1; }
  // Every entry is done; what their `done` callbacks wrote is visible.
  bool finished() const { return remaining_.load(std::memory_order_acquire) <= 0; }

 private:
  std::atomic<int> remaining_;
};

}  // namespace tfring
