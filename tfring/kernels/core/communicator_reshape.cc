#include "tfring/kernels/core/communicator_reshape.h"

namespace tfring {
namespace {

// FNV-1a, 64-bit: the same bytes give the same lineage on every rank.
constexpr uint64_t kFnvOffset = 1469598103934665603ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

uint64_t Mix(uint64_t h, const void* bytes, int64_t size) {
  const unsigned char* p = static_cast<const unsigned char*>(bytes);
  for (int64_t i = 0; i < size; ++i) {
    h ^= p[i];
    h *= kFnvPrime;
  }
  return h;
}

ReshapePlan MakeNew(std::string why) {
  ReshapePlan plan;
  plan.why = std::move(why);
  return plan;
}

}  // namespace

const char* ReshapeKindName(ReshapePlan::Kind kind) {
  switch (kind) {
    case ReshapePlan::Kind::kKeep:
      return "kept";
    case ReshapePlan::Kind::kShrink:
      return "shrunk";
    case ReshapePlan::Kind::kGrow:
      return "grown";
    case ReshapePlan::Kind::kMakeNew:
      break;
  }
  return "made anew";
}

uint64_t LineageOf(const void* bytes, int64_t size) { return Mix(kFnvOffset, bytes, size); }

uint64_t DerivedLineage(uint64_t parent, const std::vector<int32_t>& change, int32_t new_size) {
  uint64_t h = Mix(kFnvOffset, &parent, sizeof(parent));
  h = Mix(h, &new_size, sizeof(new_size));
  return change.empty() ? h : Mix(h, change.data(), change.size() * sizeof(int32_t));
}

ReshapePlan PlanReshape(const std::vector<KeptClaim>& claims) {
  const int32_t n = static_cast<int32_t>(claims.size());
  if (n == 0 || !claims[0].kept) return MakeNew("rank 0 kept no communicator");
  const KeptClaim& first = claims[0];
  // The members of rank 0's kept communicator, in this world's order.
  int32_t members = 0, last_old_rank = -1;
  bool members_first = true;  // every member comes before every newcomer
  for (int32_t r = 0; r < n; ++r) {
    const KeptClaim& c = claims[r];
    const bool member = c.kept && c.lineage == first.lineage && c.size == first.size;
    if (c.kept && !member) return MakeNew("ranks kept communicators of different jobs");
    if (member) {
      if (members != r) members_first = false;
      // Ranks keep their old order (MPI's shrink does, and a merge puts the old ranks first):
      // NCCL's shrink and grow number them that way.
      if (c.rank <= last_old_rank) return MakeNew("the old ranks are in another order");
      last_old_rank = c.rank;
      if (c.revoked != first.revoked) return MakeNew("the kept communicators differ in state");
      ++members;
    }
  }
  if (members == n) {
    if (n == first.size) {
      if (first.revoked) return MakeNew("the same members, but their communicator was revoked");
      ReshapePlan plan;
      plan.kind = ReshapePlan::Kind::kKeep;
      return plan;
    }
    for (const KeptClaim& c : claims) {
      if (!c.can_shrink) return MakeNew("this NCCL has no ncclCommShrink");
    }
    ReshapePlan plan;
    plan.kind = ReshapePlan::Kind::kShrink;
    int32_t next = 0;
    for (const KeptClaim& c : claims) {
      for (; next < c.rank; ++next) plan.excluded.push_back(next);
      next = c.rank + 1;
    }
    for (; next < first.size; ++next) plan.excluded.push_back(next);
    return plan;
  }
  // Newcomers: a grow needs every old member, first and in order, and a healthy communicator.
  if (!members_first || members != first.size) {
    return MakeNew("old members left as new ones joined");
  }
  if (first.revoked) return MakeNew("the kept communicator was revoked");
  for (const KeptClaim& c : claims) {
    if (!c.can_grow) return MakeNew("this NCCL has no ncclCommGrow");
  }
  ReshapePlan plan;
  plan.kind = ReshapePlan::Kind::kGrow;
  plan.kept_size = members;
  return plan;
}

}  // namespace tfring
