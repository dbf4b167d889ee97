// How a new runtime's device communicator comes from the one the last runtime kept, after an
// elastic reset: kept as it is (the same members), shrunk (members left, the rest in their
// old order), grown (new members after all the old ones), or made anew. NCCL's own calls for
// this (ncclCommShrink, ncclCommGrow) skip most of a new communicator's set-up; where they do
// not apply, or this NCCL lacks them, the communicator is made anew as at the first start.
//
// Every rank states what it kept (KeptClaim); the ranks exchange their claims and each
// plans from the same list, so all reach the same plan without a further round. Pure logic:
// the NCCL executor (backends/nccl) carries it out.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tfring {

// One rank's word on the communicator its last runtime kept.
struct KeptClaim {
  bool kept = false;       // it kept one, on the GPU it uses now
  uint64_t lineage = 0;    // the same on every member of that communicator, and only there
  int32_t rank = -1;       // this rank's place in it
  int32_t size = 0;        // its size
  bool revoked = false;    // its work was stopped after a failure: it can only be shrunk
  bool can_shrink = false;  // this rank's NCCL has ncclCommShrink
  bool can_grow = false;    // and ncclCommGrow
};

struct ReshapePlan {
  enum class Kind { kMakeNew, kKeep, kShrink, kGrow };
  Kind kind = Kind::kMakeNew;
  std::vector<int32_t> excluded;  // kShrink: the kept communicator's ranks left out, ascending
  int32_t kept_size = 0;          // kGrow: its size; its members are the new ranks 0..kept_size-1
  std::string why;                // kMakeNew: why not another way (for the log)
};

// The plan for a new communicator whose rank r made claims[r].
ReshapePlan PlanReshape(const std::vector<KeptClaim>& claims);

const char* ReshapeKindName(ReshapePlan::Kind kind);

// A lineage for a communicator made from `bytes` (NCCL's unique id): every member hashes the
// same bytes, so every member has the same lineage.
uint64_t LineageOf(const void* bytes, int64_t size);
// The lineage of a communicator shrunk from or grown out of one of lineage `parent`.
uint64_t DerivedLineage(uint64_t parent, const std::vector<int32_t>& change, int32_t new_size);

}  // namespace tfring
