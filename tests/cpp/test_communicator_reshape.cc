// The plan every rank makes from the ranks' claims on the communicator their last runtime kept
// (core/communicator_reshape.h): kept, shrunk, grown or made anew, and which old ranks a
// shrink leaves out. The NCCL executor carries the plan out on a GPU (tools/gpu_checks.sh).
#include "tests/cpp/test_harness.h"
#include "tfring/kernels/core/communicator_reshape.h"

namespace tfring {
namespace {

constexpr uint64_t kOld = 42;

// A rank that kept its place `rank` in a communicator of `size` (lineage kOld), on an NCCL
// with both calls.
KeptClaim Member(int32_t rank, int32_t size) {
  KeptClaim c;
  c.kept = true;
  c.lineage = kOld;
  c.rank = rank;
  c.size = size;
  c.can_shrink = c.can_grow = true;
  return c;
}

KeptClaim Newcomer() {
  KeptClaim c;
  c.can_shrink = c.can_grow = true;
  return c;
}

TFRING_TEST(CommunicatorReshape, TheSameMembersKeepTheirCommunicator) {
  const ReshapePlan plan = PlanReshape({Member(0, 3), Member(1, 3), Member(2, 3)});
  EXPECT_TRUE(plan.kind == ReshapePlan::Kind::kKeep);
  EXPECT_EQ(std::string(ReshapeKindName(plan.kind)), "kept");
}

TFRING_TEST(CommunicatorReshape, SurvivorsShrinkLeavingOutTheLostRanks) {
  // Old ranks 1 and 3 of 5 are gone; the others are renumbered in their old order.
  const ReshapePlan plan = PlanReshape({Member(0, 5), Member(2, 5), Member(4, 5)});
  ASSERT_TRUE(plan.kind == ReshapePlan::Kind::kShrink);
  EXPECT_TRUE(plan.excluded == std::vector<int32_t>({1, 3}));
  // Losing the first and the last ranks too.
  const ReshapePlan ends = PlanReshape({Member(1, 4), Member(2, 4)});
  ASSERT_TRUE(ends.kind == ReshapePlan::Kind::kShrink);
  EXPECT_TRUE(ends.excluded == std::vector<int32_t>({0, 3}));
}

TFRING_TEST(CommunicatorReshape, ARevokedCommunicatorIsShrunkNeverKept) {
  KeptClaim a = Member(0, 3), b = Member(1, 3), c = Member(2, 3);
  a.revoked = b.revoked = true;
  const ReshapePlan shrink = PlanReshape({a, b});
  ASSERT_TRUE(shrink.kind == ReshapePlan::Kind::kShrink);
  EXPECT_TRUE(shrink.excluded == std::vector<int32_t>({2}));
  c.revoked = true;
  const ReshapePlan same = PlanReshape({a, b, c});
  EXPECT_TRUE(same.kind == ReshapePlan::Kind::kMakeNew);
  EXPECT_CONTAINS(same.why, "revoked");
  // Nor grown.
  const ReshapePlan grow = PlanReshape({a, b, c, Newcomer()});
  EXPECT_TRUE(grow.kind == ReshapePlan::Kind::kMakeNew);
}

TFRING_TEST(CommunicatorReshape, NewcomersAfterEveryOldMemberGrowIt) {
  const ReshapePlan plan = PlanReshape({Member(0, 2), Member(1, 2), Newcomer(), Newcomer()});
  ASSERT_TRUE(plan.kind == ReshapePlan::Kind::kGrow);
  EXPECT_EQ(plan.kept_size, 2);
}

TFRING_TEST(CommunicatorReshape, AnythingElseIsMadeAnewSayingWhy) {
  // A newcomer before an old member, or old members gone while new ones join.
  EXPECT_TRUE(PlanReshape({Member(0, 2), Newcomer(), Member(1, 2)}).kind ==
              ReshapePlan::Kind::kMakeNew);
  const ReshapePlan both = PlanReshape({Member(0, 3), Member(2, 3), Newcomer()});
  EXPECT_TRUE(both.kind == ReshapePlan::Kind::kMakeNew);
  EXPECT_CONTAINS(both.why, "left as new ones joined");
  // Rank 0 new; old ranks out of order; communicators of two different jobs.
  EXPECT_CONTAINS(PlanReshape({Newcomer(), Member(0, 1)}).why, "rank 0");
  EXPECT_CONTAINS(PlanReshape({Member(1, 2), Member(0, 2)}).why, "order");
  KeptClaim other = Member(1, 2);
  other.lineage = kOld + 1;
  EXPECT_CONTAINS(PlanReshape({Member(0, 2), other}).why, "different jobs");
  // The first start: nobody kept anything.
  EXPECT_TRUE(PlanReshape({Newcomer(), Newcomer()}).kind == ReshapePlan::Kind::kMakeNew);
}

TFRING_TEST(CommunicatorReshape, ANcclWithoutTheCallMakesItAnew) {
  KeptClaim old_nccl = Member(2, 4);
  old_nccl.can_shrink = old_nccl.can_grow = false;
  EXPECT_CONTAINS(PlanReshape({Member(0, 4), Member(1, 4), old_nccl}).why, "ncclCommShrink");
  KeptClaim joiner = Newcomer();
  joiner.can_grow = false;
  EXPECT_CONTAINS(PlanReshape({Member(0, 1), joiner}).why, "ncclCommGrow");
  // Keeping needs no call at all.
  KeptClaim a = Member(0, 2), b = Member(1, 2);
  a.can_shrink = a.can_grow = b.can_shrink = b.can_grow = false;
  EXPECT_TRUE(PlanReshape({a, b}).kind == ReshapePlan::Kind::kKeep);
}

TFRING_TEST(CommunicatorReshape, LineagesAgreeWhereMembersAgree) {
  const char id[4] = {1, 2, 3, 4};
  const char other[4] = {1, 2, 3, 5};
  EXPECT_EQ(LineageOf(id, 4), LineageOf(id, 4));
  EXPECT_TRUE(LineageOf(id, 4) != LineageOf(other, 4));
  const uint64_t parent = LineageOf(id, 4);
  EXPECT_EQ(DerivedLineage(parent, {1}, 2), DerivedLineage(parent, {1}, 2));
  EXPECT_TRUE(DerivedLineage(parent, {1}, 2) != DerivedLineage(parent, {2}, 2));
  EXPECT_TRUE(DerivedLineage(parent, {1}, 2) != parent);
}

}  // namespace
}  // namespace tfring
