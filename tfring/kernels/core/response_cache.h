// The response cache: tensors negotiated before, each with a bit position.
//
// Every rank holds an identical copy: entries are added and erased only from information
// every rank sees in the same order (the broadcast ResponseList and the AND-ed bit set), and
// slots are assigned deterministically (the lowest free one). So in steady state a rank
// announces "cached tensor #j is ready here" with one bit, a bitwise-AND allreduce tells
// every rank which cached tensors are ready everywhere, and no names travel at all.
// When the cache is full, new tensors are simply not cached (they keep being negotiated).
#pragma once

#include <cstdint>
#include <deque>
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
  bool used(int slot) const { return slots_[slot].used; }
  const Request& signature(int slot) const { return slots_[slot].signature; }
  // Stays where it is until its slot is erased (Put adds slots without moving any): a
  // cycle executes cached responses by pointer while its negotiation adds more.
  const Response& response(int slot) const { return slots_[slot].response; }

  // Adds a successful, cacheable response under the requesting signature. No-op when full.
  void Put(const Response& response, const Request& signature);
  void Erase(int slot);

  // One past the highest slot ever used; the bit set covers [0, num_bits()).
  int num_bits() const { return static_cast<int>(slots_.size()); }

 private:
  struct Slot {
    bool used = false;
    Request signature;
    Response response;
  };
  int64_t capacity_;
  std::deque<Slot> slots_;  // a deque: adding a slot moves no other
  std::unordered_map<std::string, int> by_name_;
};

}  // namespace tfring
