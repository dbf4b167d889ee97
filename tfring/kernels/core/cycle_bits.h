// The bit set each rank contributes to the cycle's one AND-allreduce (coordinator.h, step 2).
//
// Laid out in 64-bit words, so that one reduction of a few words tells every rank:
//   flags    word 0; bit 0 set: "I have no new requests" (all set: no negotiation round);
//            bit 1 set: "no straggler exchange" (rank 0 clears it when one is due:
//            straggler_watch.h)
//   ready    one bit per cache slot: this rank holds that slot's tensor, or never holds
//            it up (a slot of a set it is not in; any slot once it has joined)
//   valid    one bit per cache slot, cleared by a rank that saw the slot's name arrive with
//            another signature (every rank then erases the slot)
//   joined   one bit per rank, cleared by that rank while its join() is pending
//   running  one bit per rank, cleared by that rank when it shuts down
// After the AND a bit is set only if every rank set it. Pure: no communication here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tfring {

class CycleBits {
 public:
  // Flags clear, no slot ready, every slot valid, every rank running and not joined.
  CycleBits(int num_slots, int num_ranks);

  void SetNoNewRequests() { words_[0] |= kNoNewRequests; }
  void SetNoStragglerExchange() { words_[0] |= kNoStragglerExchange; }
  void SetReady(int slot) { Set(ready_, slot); }
  void Invalidate(int slot) { Clear(valid_, slot); }
  void MarkJoined(int rank) { Clear(joined_, rank); }
  void MarkStopping(int rank) { Clear(running_, rank); }

  // What the control plane reduces in place.
  std::vector<uint64_t>* words() { return &words_; }

  // After the reduction: every rank's view.
  bool no_new_requests() const { return words_[0] & kNoNewRequests; }
  bool straggler_exchange() const { return !(words_[0] & kNoStragglerExchange); }
  bool valid(int slot) const { return Test(valid_, slot); }
  // Ready on every rank and valid (an invalidated slot is never run from the cache).
  bool ready(int slot) const { return Test(ready_, slot) && valid(slot); }
  bool joined(int rank) const { return !Test(joined_, rank); }
  bool running(int rank) const { return Test(running_, rank); }

 private:
  static constexpr uint64_t kNoNewRequests = 1;
  static constexpr uint64_t kNoStragglerExchange = 2;

  bool Test(size_t base, int bit) const { return (words_[base + bit / 64] >> (bit % 64)) & 1; }
  void Set(size_t base, int bit) { words_[base + bit / 64] |= uint64_t{1} << (bit % 64); }
  void Clear(size_t base, int bit) { words_[base + bit / 64] &= ~(uint64_t{1} << (bit % 64)); }

  size_t ready_, valid_, joined_, running_;  // where each part starts, in words
  std::vector<uint64_t> words_;
};

}  // namespace tfring
