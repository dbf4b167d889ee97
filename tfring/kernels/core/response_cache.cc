#include "tfring/kernels/core/response_cache.h"

namespace tfring {

ResponseCache::ResponseCache(int64_t capacity) : capacity_(capacity) {}

int ResponseCache::Find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? -1 : it->second;
}

int ResponseCache::Put(const Response& response, const Request& signature) {
  if (capacity_ <= 0) return -1;
  const auto known = by_name_.find(response.name);
  if (known != by_name_.end()) {
    Touch(known->second);
    return -1;
  }
  int slot = -1;
  int evicted = -1;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (!slots_[i].used) {
      slot = static_cast<int>(i);
      break;
    }
  }
  if (slot < 0 && static_cast<int64_t>(slots_.size()) < capacity_) {
    slot = static_cast<int>(slots_.size());
    slots_.emplace_back();
  }
  if (slot < 0) {
    slot = evicted = LeastRecentlyUsed();
    if (slot < 0) return -1;  // every slot is in use in this cycle
    by_name_.erase(slots_[slot].response.name);
  }
  slots_[slot] = Slot{true, cycle_, slots_[slot].generation + 1, signature, response};
  by_name_[response.name] = slot;
  return evicted;
}

int ResponseCache::LeastRecentlyUsed() const {
  int oldest = -1;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    if (!s.used || s.last_used == cycle_) continue;
    if (oldest < 0 || s.last_used < slots_[oldest].last_used) oldest = static_cast<int>(i);
  }
  return oldest;
}

void ResponseCache::Erase(int slot) {
  if (slot < 0 || slot >= num_bits() || !slots_[slot].used) return;
  by_name_.erase(slots_[slot].response.name);
  const uint32_t generation = slots_[slot].generation + 1;
  slots_[slot] = Slot{};
  slots_[slot].generation = generation;
}

}  // namespace tfring
