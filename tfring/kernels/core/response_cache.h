// The response cache: tensors negotiated before, each with a bit position.
//
// Every rank holds an identical copy: entries are added and erased only from information
// every rank sees in the same order (the broadcast ResponseList and the AND-ed bit set), and
// slots are assigned deterministically (the lowest free one). So in steady state a rank
// announces "cached tensor #j is ready here" with one bit, a bitwise-AND allreduce tells
// every rank which cached tensors are ready everywhere, and no names travel at all.
//
// When the cache is full, a new tensor takes the slot of the least recently used one (as
// Horovod's cache does): a job that used many names once (a broadcast of every variable at
// the start, say) would otherwise leave its training step negotiated on every step. "Used"
// is what every rank sees alike: executed from the cache, or added, in a cycle (cycles are
// counted in lockstep). A slot used in the current cycle is never taken: the cycle
// executes its response by pointer.
#pragma once

#include <cstdint>
#include <deque>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "tfring/kernels/core/message.h"

namespace tfring {

class ResponseCache {
 public:
  explicit ResponseCache(int64_t capacity);

  // Slot of `name`, or -1.
  int Find(const std::string& name) const;
  // Changes whenever the slot's content does (added, taken, erased), to a number no cache of
  // this process has issued before: a slot whose generation is as it was holds the same
  // tensor as then (CacheTicket), even across a shutdown() and init().
  uint32_t generation(int slot) const { return slots_[slot].generation; }
  bool Holds(int slot, uint32_t generation) const {
    return slot >= 0 && slot < num_bits() && slots_[slot].used &&
           slots_[slot].generation == generation;
  }
  bool used(int slot) const { return slots_[slot].used; }
  // Asks the CPU to load what Holds and signature(slot).SameButName read of `slot` (any int:
  // out of range, nothing), without waiting for it. `deep`: also the signature's shape,
  // which needs the slot itself loaded first to find it (so a second pass, PrefetchTickets).
  void Prefetch(int slot, bool deep) const;
  const Request& signature(int slot) const { return slots_[slot].signature; }
  // Stays where it is until its slot is erased (Put adds slots without moving any): a
  // cycle executes cached responses by pointer while its negotiation adds more.
  const Response& response(int slot) const { return slots_[slot].response; }

  // Counts the cycles, on every rank alike: call once at the start of each.
  void StartCycle() { ++cycle_; }
  // Records that `slot`'s response is executed in this cycle.
  void Touch(int slot) { slots_[slot].last_used = cycle_; }
  // Adds a successful, cacheable response under the requesting signature. When the cache is
  // full, the least recently used slot not used in this cycle is taken (the lowest of equals)
  // and returned: its tensor is no longer cached, and an entry waiting on it must be
  // negotiated. -1 otherwise (added in a free slot, already cached, or nothing to take).
  int Put(const Response& response, const Request& signature);
  void Erase(int slot);

  // One past the highest slot ever used; the bit set covers [0, num_bits()).
  int num_bits() const { return static_cast<int>(slots_.size()); }

 private:
  static uint32_t NextGeneration();
  struct Slot {
    bool used = false;
    uint64_t last_used = 0;  // the cycle that last executed or added it
    uint32_t generation = 0;
    Request signature;
    Response response;
  };
  // The slot Put takes when full, or -1. The first call in a cycle orders the candidates
  // once (O(n log n)); later calls in that cycle take the next (a step that overflows the
  // cache evicts hundreds a cycle, and a scan per eviction would make that O(n^2)).
  int LeastRecentlyUsed();

  int64_t capacity_;
  uint64_t cycle_ = 0;
  std::set<int> free_;  // erased slots below slots_.size(): Put takes the lowest
  std::vector<int> eviction_order_;  // used slots, least recently used first
  size_t next_eviction_ = 0;
  uint64_t eviction_order_cycle_ = ~uint64_t{0};  // the cycle eviction_order_ was made in
  std::deque<Slot> slots_;  // a deque: adding a slot moves no other
  std::unordered_map<std::string, int> by_name_;
};

}  // namespace tfring
