// The response cache when full (response_cache.h), with ranks as threads at sizes 2 and 3:
// a new tensor takes the slot of the least recently used one on every rank alike, and an
// entry that waited on a slot taken so is negotiated instead, never run as the slot's new
// tensor; a kernel's cache ticket (entry.h) finds its tensor's slot, and one the slot no
// longer matches is ignored.
#include <string>
#include <vector>

#include "tests/cpp/collective_util.h"
#include "tests/cpp/inproc_job.h"
#include "tests/cpp/test_harness.h"
#include "tfring/kernels/core/message.h"
#include "tfring/kernels/core/response_cache.h"

namespace tfring {
namespace testing {
namespace {

constexpr int kSizes[] = {2, 3};

Options WithCapacity(int64_t capacity) {
  Options o = TestOptions();
  o.cache_capacity = capacity;
  return o;
}

// Every rank allreduces `name` (4 floats, salted) and checks the sum.
void AllreduceEverywhere(InprocJob* job, const std::string& name, int salt) {
  job->OnEveryRank([&](int rank) {
    OpPtr p = SubmitAllreduce(job->rank(rank), name, DataType::kFloat32, {4},
                              TestValues(DataType::kFloat32, rank, 4, salt), ReduceOp::kSum);
    ExpectAllreduced(p, ReduceOp::kSum, job->size(), salt);
  });
}

// A kernel's ticket (slot, generation) outlives the runtime that issued it: shutdown() then
// init(), or an elastic reset, makes a new cache. Its slots must not repeat an old cache's
// generations, or an old ticket would find another tensor of the same signature in the
// slot it names and take that tensor's place.
TFRING_TEST(CacheEvictionInproc, GenerationsNeverRepeatAcrossCaches) {
  Request a;
  a.name = "a";
  a.dtype = DataType::kFloat32;
  a.shape = {4};
  Request c = a;
  c.name = "c";
  ResponseCache before(8);
  before.Put(ResponseTo(a), a);
  const int slot = before.Find("a");
  ASSERT_TRUE(slot == 0);
  const uint32_t ticket_generation = before.generation(slot);
  ResponseCache after(8);  // the runtime started again
  after.Put(ResponseTo(c), c);
  ASSERT_TRUE(after.Find("c") == slot);
  EXPECT_FALSE(after.Holds(slot, ticket_generation)) << "an old ticket names 'c''s slot";
  // Within one cache too: erased and taken again, the slot's generation is new each time.
  const uint32_t first = after.generation(slot);
  after.Erase(slot);
  const uint32_t erased = after.generation(slot);
  after.Put(ResponseTo(a), a);
  EXPECT_TRUE(after.Find("a") == slot);
  EXPECT_TRUE(first != erased && erased != after.generation(slot) &&
              first != after.generation(slot));
}

TFRING_TEST(CacheEvictionInproc, AFullCacheTakesTheLeastRecentlyUsedSlot) {
  for (int size : kSizes) {
    InprocJob job(size, WithCapacity(2));
    AllreduceEverywhere(&job, "a", 1);
    AllreduceEverywhere(&job, "b", 2);
    AllreduceEverywhere(&job, "a", 3);  // cached: "b" is now the least recently used
    const int64_t before_c = job.negotiation_rounds(0);
    AllreduceEverywhere(&job, "c", 4);  // negotiated: takes "b"'s slot
    EXPECT_LT(before_c, job.negotiation_rounds(0)) << "at size " << size;
    const int64_t after_c = job.negotiation_rounds(0);
    AllreduceEverywhere(&job, "a", 5);
    AllreduceEverywhere(&job, "c", 6);
    EXPECT_EQ(job.negotiation_rounds(0), after_c) << "'a' and 'c' stay cached, at size " << size;
    AllreduceEverywhere(&job, "b", 7);  // evicted: negotiated again, and correct
    EXPECT_LT(after_c, job.negotiation_rounds(0)) << "'b' was evicted, at size " << size;
  }
}

TFRING_TEST(CacheEvictionInproc, SeveralEvictionsInOneCycleGoOldestFirst) {
  for (int size : kSizes) {
    InprocJob job(size, WithCapacity(3));
    for (const char* name : {"a", "b", "c"}) AllreduceEverywhere(&job, name, 1);
    AllreduceEverywhere(&job, "c", 2);
    AllreduceEverywhere(&job, "a", 3);  // least recently used now: b, then c, then a
    // "d" and "e" negotiated in one cycle: they take b's and c's slots, in that order.
    job.OnEveryRank([&](int rank) {
      std::vector<Entry> both;
      std::vector<OpPtr> ops;
      for (const char* name : {"d", "e"}) {
        ops.push_back(SubmitAllreduce([&](Entry e) { both.push_back(std::move(e)); }, name,
                                      DataType::kFloat32, {4},
                                      TestValues(DataType::kFloat32, rank, 4, 4), ReduceOp::kSum));
      }
      job.rank(rank)->EnqueueAll(std::move(both));
      for (const OpPtr& p : ops) ExpectAllreduced(p, ReduceOp::kSum, size, 4);
    });
    const int64_t rounds = job.negotiation_rounds(0);
    for (const char* name : {"a", "d", "e"}) AllreduceEverywhere(&job, name, 5);
    EXPECT_EQ(job.negotiation_rounds(0), rounds) << "'a', 'd', 'e' cached, at size " << size;
    AllreduceEverywhere(&job, "b", 6);
    EXPECT_LT(rounds, job.negotiation_rounds(0)) << "'b' was evicted, at size " << size;
    const int64_t after_b = job.negotiation_rounds(0);
    AllreduceEverywhere(&job, "c", 7);
    EXPECT_LT(after_b, job.negotiation_rounds(0)) << "'c' was evicted, at size " << size;
  }
}

TFRING_TEST(CacheEvictionInproc, AnEntryWaitingOnATakenSlotIsNegotiated) {
  for (int size : kSizes) {
    InprocJob job(size, WithCapacity(1));
    AllreduceEverywhere(&job, "a", 1);  // cached in the one slot
    // Rank 0 submits "a" again; it waits on the slot, which the others have not marked
    // ready. Then every rank negotiates "c", which takes that slot.
    OpPtr waiting = SubmitAllreduce(job.rank(0), "a", DataType::kFloat32, {4},
                                    TestValues(DataType::kFloat32, 0, 4, 2), ReduceOp::kSum);
    AllreduceEverywhere(&job, "c", 3);
    // Were rank 0's "a" still on the slot, the next "c" would run it as "c" (or hang).
    AllreduceEverywhere(&job, "c", 4);
    job.OnEveryRank([&](int rank) {
      if (rank == 0) return;
      OpPtr p = SubmitAllreduce(job.rank(rank), "a", DataType::kFloat32, {4},
                                TestValues(DataType::kFloat32, rank, 4, 2), ReduceOp::kSum);
      ExpectAllreduced(p, ReduceOp::kSum, size, 2);
    });
    ExpectAllreduced(waiting, ReduceOp::kSum, size, 2);
  }
}

TFRING_TEST(CacheEvictionInproc, ASlotRunInTheSameCycleIsNotTaken) {
  for (int size : kSizes) {
    InprocJob job(size, WithCapacity(1));
    AllreduceEverywhere(&job, "a", 1);
    // In one cycle: "a" from the cache and the new "c" negotiated. "c" must not take the
    // slot "a" runs from in that cycle; it stays uncached instead.
    for (int step = 0; step < 3; ++step) {
      job.OnEveryRank([&](int rank) {
        std::vector<Entry> both;
        OpPtr a = SubmitAllreduce(
            [&](Entry e) { both.push_back(std::move(e)); }, "a", DataType::kFloat32, {4},
            TestValues(DataType::kFloat32, rank, 4, 10 + step), ReduceOp::kSum);
        OpPtr c = SubmitAllreduce(
            [&](Entry e) { both.push_back(std::move(e)); }, "c", DataType::kFloat32, {4},
            TestValues(DataType::kFloat32, rank, 4, 20 + step), ReduceOp::kSum);
        job.rank(rank)->EnqueueAll(std::move(both));
        ExpectAllreduced(a, ReduceOp::kSum, size, 10 + step);
        ExpectAllreduced(c, ReduceOp::kSum, size, 20 + step);
      });
    }
  }
}

// Allreduces `name` on every rank through each rank's kernel ticket (entry.h), as a TF
// kernel submits its tensor.
void AllreduceWithTickets(InprocJob* job, const std::string& name, const Shape& shape, int salt,
                          std::vector<CacheTicket>* tickets) {
  job->OnEveryRank([&](int rank) {
    const int64_t count = NumElements(shape);
    OpPtr p = SubmitAllreduce(
        [&](Entry e) {
          e.cache_ticket = &(*tickets)[rank];
          job->rank(rank)->Enqueue(std::move(e));
        },
        name, DataType::kFloat32, shape, TestValues(DataType::kFloat32, rank, count, salt),
        ReduceOp::kSum);
    ExpectAllreduced(p, ReduceOp::kSum, job->size(), salt);
  });
}

TFRING_TEST(CacheEvictionInproc, AKernelTicketFollowsItsTensorsSlot) {
  for (int size : kSizes) {
    InprocJob job(size, WithCapacity(1));
    std::vector<CacheTicket> a(size), b(size);
    AllreduceWithTickets(&job, "a", {4}, 1, &a);  // negotiated, then cached
    EXPECT_EQ(a[0].value.load(), 0u) << "no ticket before the tensor ran from the cache";
    AllreduceWithTickets(&job, "a", {4}, 2, &a);  // from the cache: the ticket is issued
    const uint64_t first = a[0].value.load();
    EXPECT_TRUE(first != 0) << "at size " << size;
    const int64_t rounds = job.negotiation_rounds(0);
    AllreduceWithTickets(&job, "a", {4}, 3, &a);  // through the ticket
    EXPECT_EQ(job.negotiation_rounds(0), rounds) << "the ticket found the slot";
    AllreduceWithTickets(&job, "b", {4}, 4, &b);  // takes the one slot
    AllreduceWithTickets(&job, "a", {4}, 5, &a);  // a stale ticket: negotiated, right
    AllreduceWithTickets(&job, "a", {6}, 6, &a);  // another shape under the same name
    AllreduceWithTickets(&job, "a", {6}, 7, &a);  // cached again: a new ticket
    EXPECT_TRUE(a[0].value.load() != first) << "the slot changed since the first ticket";
    const int64_t later = job.negotiation_rounds(0);
    AllreduceWithTickets(&job, "a", {6}, 8, &a);
    EXPECT_EQ(job.negotiation_rounds(0), later) << "the new ticket found the slot";
  }
}

// A ticket is trusted for its name without comparing names, never for the rest of the
// signature: the same kernel with a new shape while its ticket is valid is negotiated again.
TFRING_TEST(CacheEvictionInproc, AValidTicketStillChecksTheSignature) {
  for (int size : kSizes) {
    InprocJob job(size, WithCapacity(4));
    std::vector<CacheTicket> a(size);
    AllreduceWithTickets(&job, "a", {4}, 1, &a);  // negotiated, then cached
    AllreduceWithTickets(&job, "a", {4}, 2, &a);  // from the cache: the ticket is issued
    const uint64_t ticket = a[0].value.load();
    EXPECT_TRUE(ticket != 0) << "at size " << size;
    const int64_t rounds = job.negotiation_rounds(0);
    AllreduceWithTickets(&job, "a", {2, 3}, 3, &a);  // the ticket's slot, another shape
    EXPECT_TRUE(job.negotiation_rounds(0) > rounds) << "the new shape was negotiated";
    AllreduceWithTickets(&job, "a", {2, 3}, 4, &a);
    AllreduceWithTickets(&job, "a", {2, 3}, 5, &a);
    EXPECT_TRUE(a[0].value.load() != ticket) << "the ticket follows the new signature";
  }
}

}  // namespace
}  // namespace testing
}  // namespace tfring
