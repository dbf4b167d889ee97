// What one cycle executes (coordinator.h, step 4), in order.
#pragma once

#include <deque>
#include <utility>
#include <vector>

#include "tfring/kernels/core/message.h"

namespace tfring {

// Responses from the cache, by pointer (no copy per tensor per cycle), and responses made
// in the cycle (negotiated, or cached ones with the ranks that have joined), which it owns.
// Each carries the cache slot it came from (-1 for a negotiated one): this rank's entry for
// it waits there (pending_entries.h).
struct CycleResponses {
  struct Item {
    const Response* response;
    int slot;
  };
  std::vector<Item> order;
  std::deque<Response> made;  // a deque: its elements stay where they are as it grows

  void Add(const Response* cached, int slot) { order.push_back({cached, slot}); }
  void Add(Response made_here, int slot = -1) {
    made.push_back(std::move(made_here));
    order.push_back({&made.back(), slot});
  }
  bool empty() const { return order.empty(); }
};
using CycleItems = std::vector<CycleResponses::Item>;

}  // namespace tfring
