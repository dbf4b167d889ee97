#include "tfring/kernels/core/tensor_key.h"

namespace tfring {
namespace {

std::string WithSet(std::string s, const std::vector<int32_t>& process_set) {
  if (process_set.empty()) return s;
  s += " [process set ";
  for (size_t i = 0; i < process_set.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(process_set[i]);
  }
  s += "]";
  return s;
}

}  // namespace

const std::string& SharedName::Empty() {
  static const std::string* const empty = new std::string();
  return *empty;
}

std::string KeyString(const TensorKey& key, const std::vector<int32_t>& process_set) {
  if (key.unnamed < 0 && key.part < 0 && process_set.empty()) return key.name;  // most tensors
  std::string s = key.unnamed >= 0 ? "unnamed." + std::to_string(key.unnamed) : key.name.str();
  if (key.part >= 0) s += "." + std::to_string(key.part);
  return WithSet(std::move(s), process_set);
}

std::string UnnamedCacheKey(const std::string& call_site, const std::vector<int32_t>& process_set) {
  return WithSet("unnamed@" + call_site, process_set);
}

}  // namespace tfring
