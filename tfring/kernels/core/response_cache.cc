#include "tfring/kernels/core/response_cache.h"

#include <algorithm>
#include <atomic>
#include <utility>

namespace tfring {

uint32_t ResponseCache::NextGeneration() {
  // One count for every cache of the process: a kernel's ticket outlives the runtime that
  // issued it (shutdown() then init(), an elastic reset), and a new cache counting from
  // zero again would hand its slot and generation to another tensor. 0 is never issued.
  static std::atomic<uint32_t> last{0};
  uint32_t g = last.fetch_add(1, std::memory_order_relaxed) + 1;
  while (g == 0) g = last.fetch_add(1, std::memory_order_relaxed) + 1;
  return g;
}

ResponseCache::ResponseCache(int64_t capacity) : capacity_(capacity) {}

int ResponseCache::Find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? -1 : it->second;
}

void ResponseCache::Prefetch(int slot, bool deep) const {
  if (slot < 0 || slot >= num_bits()) return;
  const Slot& s = slots_[slot];
  if (deep) {
    if (!s.signature.shape.empty()) __builtin_prefetch(s.signature.shape.data());
    return;
  }
  // From `used` to the signature's last compared field (the request's splits).
  const char* line = reinterpret_cast<const char*>(&s);
  const char* end = reinterpret_cast<const char*>(&s.signature.splits + 1);
  for (; line < end; line += 64) __builtin_prefetch(line);
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
  if (!free_.empty()) {
    slot = *free_.begin();
    free_.erase(free_.begin());
  } else if (static_cast<int64_t>(slots_.size()) < capacity_) {
    slot = static_cast<int>(slots_.size());
    slots_.emplace_back();
  }
  if (slot < 0) {
    slot = evicted = LeastRecentlyUsed();
    if (slot < 0) return -1;  // every slot is in use in this cycle
    by_name_.erase(slots_[slot].response.name);
  }
  slots_[slot] = Slot{true, cycle_, NextGeneration(), signature, response};
  by_name_[response.name] = slot;
  return evicted;
}

int ResponseCache::LeastRecentlyUsed() {
  if (eviction_order_cycle_ != cycle_) {
    // Within a cycle the order holds: touches come before negotiation's Puts, and a slot
    // Put in this cycle is skipped below.
    std::vector<std::pair<uint64_t, int>> by_age;
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (slots_[i].used && slots_[i].last_used < cycle_) {
        by_age.emplace_back(slots_[i].last_used, static_cast<int>(i));
      }
    }
    std::sort(by_age.begin(), by_age.end());  // oldest first; the lowest slot of equals
    eviction_order_.clear();
    for (const auto& aged : by_age) eviction_order_.push_back(aged.second);
    next_eviction_ = 0;
    eviction_order_cycle_ = cycle_;
  }
  while (next_eviction_ < eviction_order_.size()) {
    const int slot = eviction_order_[next_eviction_++];
    if (slots_[slot].used && slots_[slot].last_used < cycle_) return slot;
  }
  return -1;  // every slot is in use in this cycle
}

void ResponseCache::Erase(int slot) {
  if (slot < 0 || slot >= num_bits() || !slots_[slot].used) return;
  by_name_.erase(slots_[slot].response.name);
  slots_[slot] = Slot{};
  slots_[slot].generation = NextGeneration();
  free_.insert(slot);
}

}  // namespace tfring
