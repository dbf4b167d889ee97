// Numbers of unnamed eager calls (TensorKey::unnamed, shown "unnamed.<n>"), counting such
// calls per process set since init, so that ranks making the same calls pair them in order
// (tfring/_ops/naming.py).
//
// When ranks' calls drift apart (one rank made a call the others did not), rank 0 fails the
// calls involved on every rank (Negotiator::TakeDrifted). Every rank then moves its count
// past the failed call's number (CatchUp), so the ranks number their next calls alike and
// pair again, instead of every later call mismatching by one.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "tfring/kernels/core/tensor_key.h"

namespace tfring {

class UnnamedNames {
 public:
  // The number of the next unnamed call in `process_set` (empty: all ranks). Thread-safe.
  int64_t Next(const std::vector<int32_t>& process_set);

  // The tensor `key` failed on every rank, or this rank sat it out joined: when it was an
  // unnamed call's (number n), the next call in its set is numbered n + 1 or later. A named
  // tensor changes nothing.
  void CatchUp(const TensorKey& key);

 private:
  std::mutex mutex_;
  std::map<std::vector<int32_t>, int64_t> next_;
};

}  // namespace tfring
