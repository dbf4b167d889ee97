#include "tfring/kernels/core/cycle_driver.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>

#include <thread>

#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "tfring/kernels/common/logging.h"

namespace tfring {
namespace {

constexpr auto kHotSpin = std::chrono::microseconds(200);
constexpr auto kMinBackoff = std::chrono::microseconds(10);
// With entries pending but no progress (peers have not submitted them yet), cycles repeat
// after at most this pause: short, because a peer that submits now waits for our next cycle.
constexpr auto kMaxBackoff = std::chrono::microseconds(100);
// How long an eager caller runs cycles before it leaves its op to the background thread:
// a small collective finishes within a few cycles; an op whose peers are late is then
// carried on by the background thread, and the caller waits to be woken.
constexpr auto kDriveFor = std::chrono::milliseconds(1);
constexpr auto kLockWait = std::chrono::microseconds(100);
constexpr int kMaxIdleWaits = 16;

// Set while this thread runs a cycle: a `done` callback that submits another eager op from
// inside the cycle must not try to run one itself.
thread_local bool t_in_cycle = false;

}  // namespace

uint64_t RecentBursts::Largest() const {
  return *std::max_element(sizes_.begin(), sizes_.end());
}

void CycleDriver::Start() {
  TFRING_CHECK(!thread_.joinable()) << "cycles started twice";
  thread_ = std::thread([this] { Loop(); });
}

void CycleDriver::Join() {
  if (thread_.joinable()) thread_.join();
}

void CycleDriver::Loop() {
#ifdef __linux__
  prctl(PR_SET_TIMERSLACK, 1000UL);  // 1 us: short back-off sleeps must stay short
  prctl(PR_SET_NAME, "tfring-cycles");  // so that top -H, perf and tests can tell it apart
  if (options_.background_sched_batch) {
    // The `done` callbacks this thread runs hand the ops' successors to TensorFlow's
    // threads, and each hand-off wakes one of them. Sharing a core with it (one rank per
    // core), this thread is preempted by every thread it wakes, halfway through completing
    // a cycle's ops, and the switches back and forth lengthen every training step (docs/
    // benchmarks.md). Under SCHED_BATCH it finishes the cycle first. It needs no privilege,
    // keeps the thread's nice level, and a thread woken under it still runs on an idle core
    // at once; on a busy one it waits for the tick instead of preempting. Threads it starts
    // (a library's helper threads made on first use) inherit the policy.
    sched_param normal_priority{};
    if (sched_setscheduler(0, SCHED_BATCH, &normal_priority) != 0) {
      TFRING_LOG(kDebug) << "the background thread stays under SCHED_OTHER: "
                         << "sched_setscheduler(SCHED_BATCH) failed, errno " << errno;
    }
  }
#endif
  SteadyClock::duration backoff = SteadyClock::duration::zero();
  auto last_progress = SteadyClock::now();
  // How long to sleep with nothing in flight: the cycle time, doubled (up to kMaxIdleWaits
  // of it) while eager callers keep the cycles going, since every wake-up of this thread
  // delays the caller's op on this core.
  SteadyClock::duration idle_wait = SteadyClock::duration::zero();
  while (true) {
    const SteadyClock::duration cycle_time = cycles_->cycle_time();
    if (idle_wait < cycle_time) idle_wait = cycle_time;
    const SteadyClock::duration wait = in_flight_.load() ? backoff : idle_wait;
    if (wait > SteadyClock::duration::zero()) {
      // Stay awake (yielding) briefly after progress: ops come in bursts, and waking a
      // sleeping thread costs more than a small collective.
      while (intake_->queued() == 0 &&
             SteadyClock::now() - last_progress < kHotSpin) {
        sched_yield();
      }
    }
    const bool stopping = intake_->WaitForWork(wait);
    // Eager callers that drive cycles (Drive) keep the cycles going: with nothing
    // left to do, the next idle cycle is due a cycle time after their last one. Checked
    // without the lock, so that this thread's timer never holds a caller up.
    const auto since_last = SteadyClock::now().time_since_epoch() -
                            std::chrono::nanoseconds(last_cycle_ns_.load());
    if (!stopping && !in_flight_.load() && intake_->queued() == 0 &&
        since_last < cycle_time) {
      idle_wait = std::min(idle_wait * 2, cycle_time * kMaxIdleWaits);
      continue;
    }
    idle_wait = cycle_time;
    WaitForBurstToEnd(cycle_time);
    bool progress = false;
    {
      std::lock_guard<std::mutex> cycle(mutex_);
      if (!CycleOnce(&progress)) return;
    }
    if (progress) {
      last_progress = SteadyClock::now();
      backoff = SteadyClock::duration::zero();
    } else {
      backoff = std::min<SteadyClock::duration>(
          std::max<SteadyClock::duration>(backoff * 2, kMinBackoff),
          std::min<SteadyClock::duration>(kMaxBackoff, cycle_time));
    }
  }
}

void CycleDriver::WaitForBurstToEnd(SteadyClock::duration cycle_time) {
  uint64_t seen = intake_->graph_ops();
  if (options_.batch_gap_us <= 0 || seen == graph_ops_seen_) return;
  // Once as many ops have come as in the largest recent burst, this burst (a step's
  // gradients, as last time) is complete: waiting out the gap would only delay it. On a
  // core shared with TensorFlow's threads, this thread often runs only once the burst is
  // over, so the gap would be added to every step (docs/benchmarks.md).
  const uint64_t expected = recent_bursts_.Largest();
  const auto complete = [&] { return expected > 0 && seen - graph_ops_seen_ >= expected; };
  const auto gap = std::chrono::duration_cast<SteadyClock::duration>(
      std::chrono::duration<double, std::micro>(options_.batch_gap_us));
  const auto deadline = SteadyClock::now() + std::max(cycle_time, gap);
  while (!complete() && SteadyClock::now() < deadline) {
    std::this_thread::sleep_for(gap);  // sleeps, so the executor thread can run (shared core)
    const uint64_t now_seen = intake_->graph_ops();
    if (now_seen == seen) break;
    seen = now_seen;
  }
  recent_bursts_.Add(seen - graph_ops_seen_);
  graph_ops_seen_ = seen;
}

bool CycleDriver::CycleOnce(bool* progress) {
  if (cycles_ended_) return false;
  bool stop = false;
  t_in_cycle = true;
  const Status s = cycles_->RunCycle(progress, &stop);
  t_in_cycle = false;
  in_flight_.store(cycles_->AnyPending());
  last_cycle_ns_.store(std::chrono::duration_cast<std::chrono::nanoseconds>(
                           SteadyClock::now().time_since_epoch()).count());
  if (!s.ok()) {
    TFRING_LOG(kError) << s.message();
    intake_->MarkPeerLost();
    cycles_->FailEverything(s);
  }
  if (s.ok() && !stop) return true;
  cycles_ended_ = true;
  intake_->Wake();  // the background thread sees it and ends
  return false;
}

void CycleDriver::Drive(std::vector<Entry> entries, const OpCountdown& countdown) {
  // The lock comes first, so that the background thread never finds these entries queued
  // with the lock free, and runs the cycle itself. It holds the lock for a moment when it
  // wakes on its timer, and for a cycle when it runs one (which the peers join soon): worth
  // a short wait rather than handing the op over. Not from inside a cycle (a `done`
  // callback): the next cycle takes the op.
  std::unique_lock<std::mutex> cycle(mutex_, std::defer_lock);
  const auto give_up = SteadyClock::now() + kLockWait;
  while (!t_in_cycle && !cycle.try_lock() && SteadyClock::now() < give_up) sched_yield();
  if (!intake_->Put(&entries)) return;
  if (!cycle.owns_lock()) {
    intake_->Wake();  // the thread running cycles takes them
    return;
  }
  // At least one cycle, which takes this op's entries out of the intake (before the
  // deadline check: this thread may have been descheduled past it already).
  const auto deadline = SteadyClock::now() + kDriveFor;
  // The op's entries complete only in cycles, which this thread runs while it holds the
  // lock: the countdown can change under it only in CycleOnce.
  do {
    bool progress = false;
    if (!CycleOnce(&progress)) return;  // every entry failed, this op's too
  } while (!countdown.finished() && SteadyClock::now() < deadline);
  // The background thread completes what is left (the countdown outlives it).
  const bool leftover = !countdown.finished() || cycles_->AnyPending();
  cycle.unlock();
  if (leftover) intake_->HandOver();  // the background thread carries on, at once
}

}  // namespace tfring
