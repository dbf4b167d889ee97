// The entries a rank's cycle has taken and not yet finished (held by CycleEntries).
//
// An entry waiting on a response-cache slot (a tensor negotiated before: in steady state,
// every tensor of a training step) is held by that slot. The cycle learns from the slot's
// bit that it is ready on every rank, and then reaches the entry and finishes it through
// the slot, with no lookup by name, no table node made and freed, and no copy of its name:
// per tensor per step, those would be most of the cycle's bookkeeping (docs/benchmarks.md).
// Every other entry (a new request, one negotiated and waiting for its response, a join) is
// held by name, since negotiation's responses name what they answer.
//
// At most one entry waits on a slot: a slot belongs to one name (or one unnamed call site),
// and a second entry of that name while the first is pending is refused (CycleEntries).
#pragma once

#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tfring/kernels/common/logging.h"
#include "tfring/kernels/core/entry.h"
#include "tfring/kernels/core/negotiator.h"

namespace tfring {

enum class PendingState { kToSend, kSent, kCachedWaiting, kJoined };

struct Pending {
  // Made in place (by name or by slot): an Entry is large (a request, three
  // std::functions), and every move of it is paid per tensor per step.
  Pending(Entry&& e, PendingState s, SteadyClock::time_point t)
      : entry(std::move(e)), state(s), since(t) {}

  Entry entry;
  PendingState state;
  SteadyClock::time_point since;  // when the cycle took it
};

class PendingEntries {
 public:
  using ByName = std::unordered_map<std::string, Pending>;

  bool empty() const { return by_name_.empty() && waiting_ == 0; }

  // Entries not waiting on a cache slot, by their name (their tensor key).
  ByName& by_name() { return by_name_; }
  const ByName& by_name() const { return by_name_; }
  // Whether an entry is held under `name`; no lookup while none is (the steady state).
  bool HasName(const std::string& name) const {
    return !by_name_.empty() && by_name_.count(name) > 0;
  }

  // The entry waiting on cache slot `slot`, or null.
  const Pending* AtSlot(int slot) const {
    return slot < static_cast<int>(by_slot_.size()) && by_slot_[slot] ? &*by_slot_[slot]
                                                                       : nullptr;
  }
  Pending* AtSlot(int slot) {
    return const_cast<Pending*>(static_cast<const PendingEntries*>(this)->AtSlot(slot));
  }
  // Asks the CPU to load, for writing, where PlaceAtSlot would put an entry on `slot` (any
  // int: outside the slots made so far, nothing).
  void PrefetchSlot(int slot) const {
    if (slot < 0 || slot >= static_cast<int>(by_slot_.size())) return;
    const char* line = reinterpret_cast<const char*>(&by_slot_[slot]);
    for (size_t at = 0; at < sizeof(by_slot_[slot]); at += 64) {
      __builtin_prefetch(line + at, /*rw=*/1);
    }
  }
  // Makes a waiting entry on `slot`, which holds none.
  Pending& PlaceAtSlot(int slot, Entry&& e, SteadyClock::time_point now) {
    if (slot >= static_cast<int>(by_slot_.size())) by_slot_.resize(slot + 1);
    // A second entry there would drop the first, whose op would then never complete.
    TFRING_CHECK(!by_slot_[slot]) << "cache slot " << slot << " already has a waiting entry";
    ++waiting_;
    return by_slot_[slot].emplace(std::move(e), PendingState::kCachedWaiting, now);
  }
  // Removes the entry waiting on `slot` (there is one) and returns it.
  Pending TakeFromSlot(int slot) {
    Pending p = std::move(*by_slot_[slot]);
    by_slot_[slot].reset();
    --waiting_;
    return p;
  }
  // Destroys the entry waiting on `slot` (there is one) where it is.
  void EraseAtSlot(int slot) {
    by_slot_[slot].reset();
    --waiting_;
  }
  // Calls fn(slot, pending) for each entry waiting on a slot, in slot order. `fn` must not
  // place or take entries.
  template <typename Fn>
  void ForEachWaiting(Fn fn) {
    if (waiting_ == 0) return;
    for (int slot = 0; slot < static_cast<int>(by_slot_.size()); ++slot) {
      if (by_slot_[slot]) fn(slot, *by_slot_[slot]);
    }
  }
  // The slots that have a waiting entry, in order.
  std::vector<int> WaitingSlots() {
    std::vector<int> slots;
    ForEachWaiting([&](int slot, Pending&) { slots.push_back(slot); });
    return slots;
  }

 private:
  ByName by_name_;
  std::vector<std::optional<Pending>> by_slot_;  // indexed by cache slot; grows, never shrinks
  int waiting_ = 0;                              // entries in by_slot_
};

}  // namespace tfring
