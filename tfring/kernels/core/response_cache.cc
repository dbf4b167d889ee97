#include "tfring/kernels/core/response_cache.h"

namespace tfring {

ResponseCache::ResponseCache(int64_t capacity) : capacity_(capacity) {}

int ResponseCache::Find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? -1 : it->second;
}

void ResponseCache::Put(const Response& response, const Request& signature) {
  if (by_name_.count(response.name)) return;
  int slot = -1;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (!slots_[i].used) {
      slot = static_cast<int>(i);
      break;
    }
  }
  if (slot < 0) {
    if (static_cast<int64_t>(slots_.size()) >= capacity_) return;
    slot = static_cast<int>(slots_.size());
    slots_.emplace_back();
  }
  slots_[slot] = Slot{true, signature, response};
  by_name_[response.name] = slot;
}

void ResponseCache::Erase(int slot) {
  if (slot < 0 || slot >= num_bits() || !slots_[slot].used) return;
  by_name_.erase(slots_[slot].response.name);
  slots_[slot] = Slot{};
}

}  // namespace tfring
