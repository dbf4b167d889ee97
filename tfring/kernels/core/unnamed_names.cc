#include "tfring/kernels/core/unnamed_names.h"

#include <algorithm>

#include "tfring/kernels/core/tensor_key.h"

namespace tfring {

std::string UnnamedNames::Next(const std::vector<int32_t>& process_set) {
  std::lock_guard<std::mutex> lock(mutex_);
  return UnnamedName(next_[process_set]++);
}

void UnnamedNames::CatchUp(const std::vector<int32_t>& process_set, const std::string& name) {
  const int64_t n = UnnamedNumber(name);
  if (n < 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t& next = next_[process_set];
  next = std::max(next, n + 1);
}

}  // namespace tfring
