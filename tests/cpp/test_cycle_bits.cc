// The cycle's bit set (core/cycle_bits.h): what every rank learns from one AND of the
// ranks' words, across word boundaries.
#include "tests/cpp/test_harness.h"
#include "tfring/kernels/core/cycle_bits.h"

namespace tfring {
namespace {

// What the control plane does: the AND of every rank's words, given to each.
void AndAcross(std::vector<CycleBits>* ranks) {
  std::vector<uint64_t> all = *(*ranks)[0].words();
  for (CycleBits& b : *ranks) {
    for (size_t i = 0; i < all.size(); ++i) all[i] &= (*b.words())[i];
  }
  for (CycleBits& b : *ranks) *b.words() = all;
}

TFRING_TEST(CycleBits, AFreshSetSaysNothingIsReadyAndEveryoneRuns) {
  CycleBits b(130, 65);
  EXPECT_FALSE(b.no_new_requests());
  for (int slot = 0; slot < 130; ++slot) {
    EXPECT_TRUE(b.valid(slot));
    EXPECT_FALSE(b.ready(slot));
  }
  for (int r = 0; r < 65; ++r) {
    EXPECT_FALSE(b.joined(r));
    EXPECT_TRUE(b.running(r));
  }
}

TFRING_TEST(CycleBits, EveryRankLearnsWhatAllAgreeOn) {
  const int kSlots = 70, kRanks = 3;  // slots 64.. sit in a second word
  std::vector<CycleBits> ranks(kRanks, CycleBits(kSlots, kRanks));
  for (CycleBits& b : ranks) {
    b.SetNoNewRequests();
    b.SetReady(3);
    b.SetReady(66);
  }
  ranks[1].SetReady(5);           // only rank 1 holds slot 5
  ranks[0].SetReady(69);
  ranks[1].SetReady(69);
  ranks[2].SetReady(69);
  ranks[2].Invalidate(69);        // rank 2 saw slot 69's name with another signature
  ranks[2].MarkJoined(2);
  ranks[1].MarkStopping(1);
  AndAcross(&ranks);
  for (const CycleBits& b : ranks) {
    EXPECT_TRUE(b.no_new_requests());
    EXPECT_TRUE(b.ready(3));
    EXPECT_TRUE(b.ready(66));
    EXPECT_FALSE(b.ready(5)) << "ready on one rank only";
    EXPECT_FALSE(b.valid(69));
    EXPECT_FALSE(b.ready(69)) << "an invalidated slot is never run from the cache";
    EXPECT_TRUE(b.joined(2));
    EXPECT_FALSE(b.joined(0) || b.joined(1));
    EXPECT_FALSE(b.running(1));
    EXPECT_TRUE(b.running(0) && b.running(2));
  }
}

TFRING_TEST(CycleBits, OneRankWithNewRequestsClearsTheFlagForAll) {
  std::vector<CycleBits> ranks(2, CycleBits(0, 2));
  ranks[0].SetNoNewRequests();
  AndAcross(&ranks);
  EXPECT_FALSE(ranks[0].no_new_requests());
  EXPECT_FALSE(ranks[1].no_new_requests());
}

}  // namespace
}  // namespace tfring
