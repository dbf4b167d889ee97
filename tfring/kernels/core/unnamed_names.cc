#include "tfring/kernels/core/unnamed_names.h"

#include <algorithm>
#include <cctype>

namespace tfring {

namespace {
constexpr char kPrefix[] = "unnamed.";
constexpr size_t kPrefixLength = sizeof(kPrefix) - 1;
}  // namespace

std::string UnnamedNames::Next(const std::vector<int32_t>& process_set) {
  std::lock_guard<std::mutex> lock(mutex_);
  return kPrefix + std::to_string(next_[process_set]++);
}

void UnnamedNames::CatchUp(const std::vector<int32_t>& process_set, const std::string& name) {
  const int64_t n = NumberOf(name);
  if (n < 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t& next = next_[process_set];
  next = std::max(next, n + 1);
}

int64_t UnnamedNames::NumberOf(const std::string& name) {
  if (name.compare(0, kPrefixLength, kPrefix) != 0) return -1;
  size_t end = kPrefixLength;
  while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end]))) ++end;
  if (end == kPrefixLength || end - kPrefixLength > 18) return -1;  // no digits, or too many
  // Then the end, a grouped op's ".<i>", or a process set's " [process set ...]".
  if (end < name.size() && name[end] != '.' && name[end] != ' ') return -1;
  return std::stoll(name.substr(kPrefixLength, end - kPrefixLength));
}

}  // namespace tfring
