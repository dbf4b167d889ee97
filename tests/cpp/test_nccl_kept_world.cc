// The world communicator one runtime leaves to the next (backends/nccl/nccl_kept_world.h):
// who owns it when, and NCCL's reshaping calls found in the NCCL tfring loaded. No GPU is
// needed: the slot only holds handles (null here, so nothing is ever freed), and the calls
// are looked up, not made. Built in GPU builds (CI's has NCCL's headers and library); the
// suite runs it against the NCCL the build found and against the host GPU.
#include "tests/cpp/test_harness.h"
#include "tfring/kernels/backends/nccl/nccl_kept_world.h"
#include "tfring/kernels/backends/nccl/nccl_library.h"

namespace tfring {
namespace {

// A stand-in communicator told apart by its lineage (its handle stays null).
KeptComm World(uint64_t lineage) {
  KeptComm c;
  c.lineage = lineage;
  c.device = 0;
  c.rank = 0;
  c.size = 2;
  return c;
}

int owner_a, owner_b, owner_c;  // executors, by address

TFRING_TEST(NcclKeptWorld, ARuntimeThatEndsLeavesItsWorldToTheNext) {
  KeptWorld::Lease(World(1), &owner_a);
  EXPECT_TRUE(KeptWorld::Leave(&owner_a));  // not its to free any more
  KeptComm taken;
  ASSERT_TRUE(KeptWorld::Take(&taken));
  EXPECT_EQ(taken.lineage, 1u);
  EXPECT_FALSE(taken.revoked);
  EXPECT_FALSE(KeptWorld::Take(&taken));   // handed over once
  EXPECT_FALSE(KeptWorld::Leave(&owner_a));  // and never again
}

TFRING_TEST(NcclKeptWorld, AnAbandonedRuntimesWorldIsTakenWhileItsExecutorLives) {
  // A runtime abandoned after a lost peer is never destroyed; the next one takes its world.
  KeptWorld::Lease(World(2), &owner_b);
  KeptComm taken;
  ASSERT_TRUE(KeptWorld::Take(&taken));
  EXPECT_EQ(taken.lineage, 2u);
  // Were it destroyed after all, it must not free what the new runtime took.
  EXPECT_TRUE(KeptWorld::Leave(&owner_b));
  EXPECT_FALSE(KeptWorld::Leave(&owner_b));
}

TFRING_TEST(NcclKeptWorld, ARevokedWorldIsKeptMarkedAndAnAbortedOneIsNot) {
  KeptWorld::Lease(World(3), &owner_c);
  KeptWorld::MarkRevoked(&owner_a);  // another executor's word changes nothing
  KeptWorld::MarkRevoked(&owner_c);
  EXPECT_TRUE(KeptWorld::Leave(&owner_c));
  KeptComm taken;
  ASSERT_TRUE(KeptWorld::Take(&taken));
  EXPECT_TRUE(taken.revoked);
  KeptWorld::Lease(World(4), &owner_c);
  KeptWorld::Drop(&owner_b);  // not the holder: nothing happens
  KeptWorld::Drop(&owner_c);
  EXPECT_FALSE(KeptWorld::Take(&taken));
  EXPECT_FALSE(KeptWorld::Leave(&owner_c));
}

TFRING_TEST(NcclKeptWorld, TheNoteSaysHowTheLatestWorldWasMade) {
  KeptWorld::NoteMade("shrunk");
  EXPECT_EQ(KeptWorld::LastMade(), "shrunk");
}

TFRING_TEST(NcclKeptWorld, TheCallsAreFoundWhereThisNcclHasThem) {
  // The NCCL tfring's build found, or the host GPU where TFRING_NCCL_LIBRARY names it: the
  // suite runs this both ways.
  const LoadedLibraryReport& nccl = NcclReport();
  EXPECT_EQ(nccl.error, "");
  EXPECT_EQ(nccl.file, nccl.chosen);
  const NcclReshapeCalls& calls = ReshapeCalls();
  ASSERT_TRUE(calls.version > 0);
  std::printf("NCCL %d (%s): revoke %s, shrink %s, grow %s\n", calls.version, nccl.file.c_str(),
              calls.revoke ? "yes" : "no", calls.shrink ? "yes" : "no", calls.grow ? "yes" : "no");
  // Each from the release that documents it (2.28.7, 2.27.3, 2.29.2); none before.
  EXPECT_EQ(calls.revoke != nullptr, calls.version >= 22807);
  EXPECT_EQ(calls.shrink != nullptr, calls.version >= 22703);
  EXPECT_EQ(calls.grow != nullptr, calls.version >= 22902);
  EXPECT_EQ(calls.unique_id_for_grow != nullptr, calls.grow != nullptr);
}

}  // namespace
}  // namespace tfring
