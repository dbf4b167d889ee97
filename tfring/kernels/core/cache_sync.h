// CacheSync: the response cache (response_cache.h) and what every rank does with it in
// lockstep, so that every rank's copy stays identical: the cycle count, the bits a rank
// sets for slots it never holds up, what the AND of the bits erases and makes ready, and
// rank 0's cacheable responses recorded in list order. It alone writes the cache; the
// take step (CycleEntries::Take, cycle_entries.h) reads it to find the slot a new entry
// may wait on.
//
// Used only by the thread that runs a cycle (coordinator.h), on every rank in the same
// cycles, in the order of the cycle's steps.
#pragma once

#include <cstdint>
#include <vector>

#include "tfring/kernels/common/options.h"
#include "tfring/kernels/core/cycle_bits.h"
#include "tfring/kernels/core/cycle_responses.h"
#include "tfring/kernels/core/message.h"
#include "tfring/kernels/core/response_cache.h"

namespace tfring {

class CacheSync {
 public:
  CacheSync(const Options& options, int rank, int size);

  const ResponseCache& cache() const { return cache_; }
  // The slots the cycle's bit set covers.
  int num_bits() const { return cache_.num_bits(); }

  // Step 1: counts the cycle, on every rank alike (the cache's recency agrees).
  void StartCycle() { cache_.StartCycle(); }
  // Step 2, before the AND: the bits of the slots this rank never holds up. Any, once it
  // has `joined`; those of sets it is not in. But unnamed calls made while it has joined
  // are negotiated (their slots invalidated): their numbers tell it how many it sat out
  // (UnnamedNames::CatchUp), so that later ones pair as before.
  void MarkSlotsNotHeldUp(bool joined, CycleBits* bits) const;
  // Step 2, after the AND: erases the slots some rank invalidated (put in *erased), and
  // adds those ready everywhere to `execute`, with the set's `joined` ranks marked when any
  // rank has joined (a slot every member of which has joined is skipped: nobody submitted
  // it).
  void TakeReady(const CycleBits& bits, const std::vector<bool>& joined, bool any_joined,
                 CycleResponses* execute, std::vector<int>* erased);
  // Step 3: records a response of rank 0's list, on every rank, member of its set or not.
  // An unnamed call's is cached under its call site. Returns the slot it took from the
  // least recently used tensor, or -1 (rank 0 warns of the first such eviction).
  int Record(const Response& r);

 private:
  const Options options_;
  const int rank_;
  const int size_;
  ResponseCache cache_;
  bool eviction_warned_ = false;  // rank 0: the cache's first eviction was logged
};

}  // namespace tfring
