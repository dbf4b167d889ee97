// Names of unnamed eager calls: "unnamed.<n>", n counting such calls per process set since
// init, so that ranks making the same calls pair them in order (tfring/naming.py).
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

namespace tfring {

class UnnamedNames {
 public:
  // The name of the next unnamed call in `process_set` (empty: all ranks). Thread-safe.
  std::string Next(const std::vector<int32_t>& process_set);

  // `name` ("unnamed.<n>", a grouped op's "unnamed.<n>.<i>", either with a process set's
  // " [process set ...]" after it) failed on every rank, or this rank sat it out joined:
  // the next call in `process_set` is numbered n + 1 or later. Other names change nothing.
  void CatchUp(const std::vector<int32_t>& process_set, const std::string& name);

 private:
  std::mutex mutex_;
  std::map<std::vector<int32_t>, int64_t> next_;
};

}  // namespace tfring
