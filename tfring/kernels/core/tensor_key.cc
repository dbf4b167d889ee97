#include "tfring/kernels/core/tensor_key.h"

namespace tfring {
namespace {

std::string WithSet(std::string s, const std::vector<int32_t>& set) {
  if (set.empty()) return s;
  s += " [process set ";
  for (size_t i = 0; i < set.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(set[i]);
  }
  s += "]";
  return s;
}

}  // namespace

const std::string& SharedName::Empty() {
  static const std::string* const empty = new std::string();
  return *empty;
}

std::string KeyString(const TensorKey& key) {
  if (key.unnamed < 0 && key.part < 0 && key.set.empty()) return key.name;  // most tensors
  std::string s = key.unnamed >= 0 ? "unnamed." + std::to_string(key.unnamed) : key.name.str();
  if (key.part >= 0) s += "." + std::to_string(key.part);
  return WithSet(std::move(s), key.set);
}

std::string UnnamedCacheKey(const std::string& call_site, const std::vector<int32_t>& set) {
  return WithSet("unnamed@" + call_site, set);
}

}  // namespace tfring
