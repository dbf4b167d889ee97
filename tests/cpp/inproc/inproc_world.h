// InprocWorld: N ranks that are threads of one process, sharing memory. The in-process
// stand-in for an MPI communicator, used by the C++ tests (tests/cpp/) to run one
// Coordinator per rank without MPI.
//
// Every collective is one Exchange: each rank deposits a pointer to its contribution, all
// wait (a generation-counting barrier), each reads the others' deposits and computes its own
// result, and all wait again, so no deposit is reused before every rank has read it.
//
// Contract: like a communicator, each rank's calls come from one thread at a time, and every
// rank makes the same sequence of Exchange calls. A rank that does not arrive within
// `timeout_seconds` breaks the world: that call and every later one return kUnavailable on
// every rank (a test then fails instead of hanging).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "tfring/kernels/common/status.h"

namespace tfring {

class InprocWorld {
 public:
  explicit InprocWorld(int size, double timeout_seconds = 30.0);
  InprocWorld(const InprocWorld&) = delete;
  InprocWorld& operator=(const InprocWorld&) = delete;

  int size() const { return size_; }

  // Deposits `mine` for `rank`, waits for every rank, calls `read(deposits)` (indexed by
  // rank; valid only during the call, and read-only: peers read them concurrently), then
  // waits for every rank again.
  Status Exchange(int rank, const void* mine,
                  const std::function<void(const std::vector<const void*>& deposits)>& read);

 private:
  Status BarrierLocked(std::unique_lock<std::mutex>* lock, int rank);

  const int size_;
  const double timeout_seconds_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<const void*> deposits_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool broken_ = false;
};

}  // namespace tfring
