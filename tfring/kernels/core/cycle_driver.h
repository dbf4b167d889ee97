// CycleDriver: who runs the coordinator's cycles, and when. The cycle itself (take, agree,
// negotiate, execute) is the coordinator's (coordinator.cc); this decides which thread runs
// the next one and how long each waits in between.
//
// Who calls what, on which thread:
//  - The owner (Coordinator) calls Start() and Join(), once each, from its own thread.
//  - The background thread (tfring-cycles, under SCHED_BATCH unless TFRING_SCHED_BATCH=0)
//    runs Loop(): it sleeps while nothing is in flight, backs off briefly while peers are
//    late, and lets a graph's burst of ops end before a cycle takes them.
//  - An eager op's caller calls Drive(): it runs cycles itself while it waits, when no other
//    thread runs one, instead of handing its op over and being woken (a small collective
//    completes within a few cycles; waking a sleeping thread costs more than that).
//  - Cycles run one at a time, under the driver's lock: whoever holds it is the only caller
//    of the control plane and the backends, and runs the `done` callbacks of what it
//    completes.
//
// It owns: the background thread, the lock, whether cycles have ended, what the background
// thread reads without the lock (ops in flight, when the last cycle ended), and the record
// of recent graph bursts.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "tfring/kernels/common/options.h"
#include "tfring/kernels/common/status.h"
#include "tfring/kernels/core/entry.h"
#include "tfring/kernels/core/intake.h"
#include "tfring/kernels/core/negotiator.h"
#include "tfring/kernels/core/op_countdown.h"

namespace tfring {

// How many graph ops each of the last few bursts brought (CycleDriver::WaitForBurstToEnd).
// A steady training step brings the same number every time; a smaller burst in between
// (a metric's op, say) leaves the largest as it was.
class RecentBursts {
 public:
  void Add(uint64_t ops) { sizes_[next_++ % sizes_.size()] = ops; }
  // 0 until a burst has been seen.
  uint64_t Largest() const;

 private:
  std::array<uint64_t, 8> sizes_{};
  size_t next_ = 0;
};

class CycleDriver {
 public:
  // What the driver runs: the owner's cycle. Called only by whoever holds the driver's lock.
  class Cycles {
   public:
    virtual ~Cycles() = default;
    // One cycle; sets *progress if anything was taken, executed or changed, and *stop once
    // every rank agreed to stop. A non-OK status ends the cycles (FailEverything follows).
    virtual Status RunCycle(bool* progress, bool* stop) = 0;
    virtual bool AnyPending() const = 0;
    virtual void FailEverything(const Status& status) = 0;
    // The cycle time in force (the autotuner may change it).
    virtual SteadyClock::duration cycle_time() const = 0;
  };

  CycleDriver(const Options& options, Intake* intake, Cycles* cycles)
      : options_(options), intake_(intake), cycles_(cycles) {}

  void Start();  // the background thread
  void Join();   // after intake's RequestStop: waits for the background thread to end
  // Queues an eager op's entries (checked already) and runs cycles on this thread until
  // `countdown`, which their `done` callbacks count down, is finished, or for a while,
  // unless another thread keeps running cycles.
  void Drive(std::vector<Entry> entries, const OpCountdown& countdown);

 private:
  void Loop();
  // Waits while ops from a graph keep arriving (Entry::eager), up to the cycle time, and
  // no longer once the burst is as large as the largest recent one.
  void WaitForBurstToEnd(SteadyClock::duration cycle_time);
  // Runs one cycle; the caller holds mutex_. False once cycles have ended: every rank agreed
  // to stop, or a failure, which it logged and failed every entry with.
  bool CycleOnce(bool* progress);

  const Options options_;
  Intake* const intake_;
  Cycles* const cycles_;
  std::thread thread_;

  std::mutex mutex_;           // held while a cycle runs
  bool cycles_ended_ = false;  // under mutex_: no cycle may run any more
  // Set after each cycle, read by the background thread without the lock: whether entries
  // are in flight, and when the last cycle ended (steady clock, ns).
  std::atomic<bool> in_flight_{false};
  std::atomic<int64_t> last_cycle_ns_{0};

  // The background thread's own.
  uint64_t graph_ops_seen_ = 0;  // intake's graph op count when the last burst ended
  RecentBursts recent_bursts_;
};

}  // namespace tfring
