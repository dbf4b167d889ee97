#include "tfring/kernels/core/tensor_key.h"

#include <algorithm>
#include <cctype>

namespace tfring {
namespace {

constexpr char kSetMark[] = " [process set ";
constexpr char kUnnamedPrefix[] = "unnamed.";
constexpr size_t kUnnamedPrefixSize = sizeof(kUnnamedPrefix) - 1;

// Where a key's set begins (its size when it has none).
size_t SetStart(const std::string& key) { return std::min(key.find(kSetMark), key.size()); }

}  // namespace

std::string TensorKey(const std::string& name, const std::vector<int32_t>& process_set) {
  if (process_set.empty()) return name;
  std::string s = name + kSetMark;
  for (size_t i = 0; i < process_set.size(); ++i) {
    s += (i ? ", " : "") + std::to_string(process_set[i]);
  }
  return s + "]";
}

std::string PartName(const std::string& unit_key, size_t index) {
  std::string name = unit_key;
  name.insert(SetStart(unit_key), "." + std::to_string(index));
  return name;
}

std::string CallOf(const std::string& key) {
  const size_t set_at = SetStart(key);
  std::string name = key.substr(0, set_at);
  const std::string set = key.substr(set_at);
  const int64_t n = UnnamedNumber(name);
  if (n >= 0) return UnnamedName(n) + set;
  const size_t dot = name.rfind('.');
  if (dot != std::string::npos && dot + 1 < name.size() &&
      name.find_first_not_of("0123456789", dot + 1) == std::string::npos) {
    name.resize(dot);
  }
  return name + set;
}

std::string UnnamedName(int64_t n) { return kUnnamedPrefix + std::to_string(n); }

int64_t UnnamedNumber(const std::string& key) {
  if (key.compare(0, kUnnamedPrefixSize, kUnnamedPrefix) != 0) return -1;
  size_t end = kUnnamedPrefixSize;
  while (end < key.size() && std::isdigit(static_cast<unsigned char>(key[end]))) ++end;
  if (end == kUnnamedPrefixSize || end - kUnnamedPrefixSize > 18) return -1;  // none, too many
  // Then the end, a grouped op's ".<i>", or a set.
  if (end < key.size() && key[end] != '.' && key[end] != ' ') return -1;
  return std::stoll(key.substr(kUnnamedPrefixSize, end - kUnnamedPrefixSize));
}

bool IsSingleUnnamedKey(const std::string& key) {
  const size_t end = SetStart(key);
  if (end <= kUnnamedPrefixSize || key.compare(0, kUnnamedPrefixSize, kUnnamedPrefix) != 0) {
    return false;
  }
  for (size_t i = kUnnamedPrefixSize; i < end; ++i) {
    if (key[i] < '0' || key[i] > '9') return false;
  }
  return true;
}

std::string UnnamedCacheKey(const std::string& call_site, const std::vector<int32_t>& process_set) {
  return TensorKey("unnamed@" + call_site, process_set);
}

}  // namespace tfring
