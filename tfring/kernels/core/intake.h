// Intake: where submitted ops wait for the next cycle, and the coordinator's state that
// every thread may ask about (open, stopped and why, a stop asked for, a peer lost).
//
// Who calls what: any thread Puts (a TF kernel, the XLA handler, a test); the thread that
// runs a cycle (the background thread, or an eager caller driving) Takes; the background
// thread sleeps in WaitForWork. One mutex guards it all; the counts are also atomics, read
// without it by the background thread's spin and its burst wait.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "tfring/kernels/common/status.h"
#include "tfring/kernels/core/entry.h"

namespace tfring {

// `status`, an error that stopped tfring, as the op of tensor `name` on `rank` fails with
// it: every op that fails so (pending, queued or submitted later) names its own tensor.
Status NamingTensor(const Status& status, const std::string& name, int rank);

class Intake {
 public:
  explicit Intake(int rank) : rank_(rank) {}

  // From now on Put queues (Coordinator::Start).
  void Open();
  // Queues one op's entries, where its kernel put them (no Entry is moved); false when
  // not open: every entry has then failed, NotInitialized before Open, else with the
  // status Close gave, naming its tensor.
  bool Put(std::vector<Entry>* entries);
  // Everything queued, swapped into `*taken` (empty; both vectors keep their capacity).
  void Take(std::vector<std::vector<Entry>>* taken);
  // Later Puts fail with `status`; what was queued is returned, for the caller to fail.
  std::vector<std::vector<Entry>> Close(const Status& status);

  // Entries queued and not taken yet.
  int queued() const { return queued_.load(std::memory_order_acquire); }
  // Ops from a graph ever queued, each alone (CycleDriver::WaitForBurstToEnd).
  uint64_t graph_ops() const { return graph_ops_.load(std::memory_order_relaxed); }

  // The background thread's sleep: until an op is queued, a stop or a hand-over is asked
  // for, or `timeout` passes (none when zero). Returns whether a stop was asked for, and
  // clears the hand-over.
  bool WaitForWork(std::chrono::steady_clock::duration timeout);
  // Wakes the background thread: ops are queued, an eager caller handed its op over, or
  // the cycles ended.
  void Wake() { wake_.notify_one(); }
  void HandOver();
  void RequestStop();
  // Read by every cycle, so without the lock.
  bool stop_requested() const { return stop_requested_.load(std::memory_order_acquire); }

  void MarkPeerLost();
  // True when the control plane failed: its communicator must not be used again.
  bool peer_lost() const;
  // True once opened and then closed.
  bool stopped() const;

 private:
  const int rank_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::vector<Entry>> queue_;  // each queued op's entries, as its kernel made them
  std::atomic<int> queued_{0};             // entries in queue_
  std::atomic<uint64_t> graph_ops_{0};
  bool open_ = false;
  bool opened_ = false;
  std::atomic<bool> stop_requested_{false};
  bool handed_over_ = false;  // an eager caller stopped driving with entries in flight
  bool peer_lost_ = false;
  Status closed_status_;
};

}  // namespace tfring
