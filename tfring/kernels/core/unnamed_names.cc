#include "tfring/kernels/core/unnamed_names.h"

#include <algorithm>

namespace tfring {

int64_t UnnamedNames::Next(const std::vector<int32_t>& process_set) {
  std::lock_guard<std::mutex> lock(mutex_);
  return next_[process_set]++;
}

void UnnamedNames::CatchUp(const TensorKey& key) {
  const int64_t n = key.unnamed;
  if (n < 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t& next = next_[key.set];
  next = std::max(next, n + 1);
}

}  // namespace tfring
